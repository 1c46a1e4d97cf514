
$


b


a

first
second