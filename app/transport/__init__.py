"""The transports: raw TCP (`tcp.py`) and WebSocket (`websocket.py`), both feeding the pump
every connection shares (`connection.py`: bytes in, events to the application, replies
out), with its read deadlines and the decode worker processes."""
