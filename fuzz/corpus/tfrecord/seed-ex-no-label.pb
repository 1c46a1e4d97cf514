


image/encoded

x