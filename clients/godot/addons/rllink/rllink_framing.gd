# RLlink framing: 8 ASCII digits giving the body's length in bytes, then the body, a
# UTF-8 JSON object with a "type". TCP carries the frames as a byte stream (one read
# may hold half a frame or three); on the WebSocket each message carries frames in the
# same format, and the payloads are read as the same byte stream. So one decoder
# serves both transports: feed it whatever bytes arrive, take whole messages out.
extends Reference

const JsonWriter = preload("res://addons/rllink/rllink_json.gd")

const HEADER_SIZE = 8
const MAX_BODY_SIZE = 99999999  # what 8 digits can announce

var _buffer = PoolByteArray()
# Set once the stream is broken (a bad header): the frame boundaries are lost.
var error_message = ""


# One frame: the 8-digit byte length of the body, then the body.
static func encode(message: Dictionary) -> PoolByteArray:
	var body = JsonWriter.write(message).to_utf8()
	var frame = ("%08d" % body.size()).to_ascii()
	frame.append_array(body)
	return frame


# Bytes as they arrived.
func feed(bytes: PoolByteArray) -> void:
	if bytes.size() > 0:
		_buffer.append_array(bytes)


func buffered() -> int:
	return _buffer.size()


func clear() -> void:
	_buffer = PoolByteArray()
	error_message = ""


# The next whole message as a Dictionary; null while it is incomplete. A broken
# stream (a header that is not 8 digits, a body that is not a JSON object) returns
# null and sets error_message: the caller must drop the connection.
func next_message():
	if error_message != "" or _buffer.size() < HEADER_SIZE:
		return null
	var size = 0
	for i in range(HEADER_SIZE):
		var digit = _buffer[i]
		if digit < 48 or digit > 57:
			error_message = "the gateway sent a bad frame header %s: expected 8 ASCII digits" % _printable(_buffer.subarray(0, HEADER_SIZE - 1))
			return null
		size = size * 10 + (digit - 48)
	if _buffer.size() < HEADER_SIZE + size:
		return null
	var body = _buffer.subarray(HEADER_SIZE, HEADER_SIZE + size - 1) if size > 0 else PoolByteArray()
	var end = HEADER_SIZE + size
	_buffer = _buffer.subarray(end, _buffer.size() - 1) if _buffer.size() > end else PoolByteArray()
	var parsed = JSON.parse(body.get_string_from_utf8())
	if parsed.error != OK or typeof(parsed.result) != TYPE_DICTIONARY:
		error_message = "the gateway sent a frame body that is not a JSON object (%s)" % parsed.error_string
		return null
	return parsed.result


static func _printable(bytes: PoolByteArray) -> String:
	var text = ""
	for b in bytes:
		text += char(b) if b >= 32 and b < 127 else "\\x%02x" % b
	return "\"" + text + "\""
