
4

image/class/label

7

image/encoded

x