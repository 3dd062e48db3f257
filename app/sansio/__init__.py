"""The gateway's sans-I/O RLlink core (as h11 is HTTP's): frames and bodies in, events out;
replies in, bytes out. No sockets, no services. (The wire format it builds on is the
`rllink` package in clients/python/, which clients share.)"""
