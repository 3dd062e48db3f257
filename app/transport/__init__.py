"""The pump every transport shares: bytes in, events to the application, replies out;
read deadlines; the decode worker processes."""
