"""What a forward costs: the measured surface (`surface`), a sequence's price in a batched
step (`batched`), and the measurement itself (`measure`)."""
