# RLlink framing: 8 ASCII digits giving the body's length in bytes, then the body, a
# UTF-8 JSON object with a "type" (the Godot 3 kit's bodies: JSON only, no msgpack).
# TCP carries the frames as a byte stream (one read may hold half a frame or three); on
# the WebSocket each message carries frames in the same format, and the payloads are
# read as the same byte stream. So one decoder serves both transports: feed it whatever
# bytes arrive, take whole messages out.
extends RefCounted

const JsonWriter = preload("res://addons/rllink/rllink_json.gd")

const HEADER_SIZE = 8
const MAX_BODY_SIZE = 99999999  # what 8 digits can announce

# Set once the stream is broken (a bad header): the frame boundaries are lost.
var error_message := ""

var _buffer := PackedByteArray()


# One frame: the 8-digit byte length of the body, then the body.
static func encode(message: Dictionary) -> PackedByteArray:
	var body := JsonWriter.write(message).to_utf8_buffer()
	var frame := ("%08d" % body.size()).to_ascii_buffer()
	frame.append_array(body)
	return frame


# Bytes as they arrived.
func feed(bytes: PackedByteArray) -> void:
	if bytes.size() > 0:
		_buffer.append_array(bytes)


func buffered() -> int:
	return _buffer.size()


func clear() -> void:
	_buffer = PackedByteArray()
	error_message = ""


# The next whole message as a Dictionary; null while it is incomplete. A broken
# stream (a header that is not 8 digits, a body that is not a JSON object) returns
# null and sets error_message: the caller must drop the connection. JSON numbers come
# back as floats (Godot 4's parser): int() what must be an int.
func next_message():
	if error_message != "" or _buffer.size() < HEADER_SIZE:
		return null
	var size := 0
	for i in range(HEADER_SIZE):
		var digit := _buffer[i]
		if digit < 48 or digit > 57:
			error_message = (
				"the gateway sent a bad frame header %s: expected 8 ASCII digits"
				% _printable(_buffer.slice(0, HEADER_SIZE))
			)
			return null
		size = size * 10 + (digit - 48)
	if _buffer.size() < HEADER_SIZE + size:
		return null
	var body := _buffer.slice(HEADER_SIZE, HEADER_SIZE + size)
	_buffer = _buffer.slice(HEADER_SIZE + size)
	var json := JSON.new()
	var err := json.parse(body.get_string_from_utf8())
	if err != OK or typeof(json.data) != TYPE_DICTIONARY:
		var why: String = json.get_error_message() if err != OK else "not an object"
		error_message = "the gateway sent a frame body that is not a JSON object (%s)" % why
		return null
	return json.data


static func _printable(bytes: PackedByteArray) -> String:
	var text := ""
	for b in bytes:
		text += String.chr(b) if b >= 32 and b < 127 else "\\x%02x" % b
	return '"' + text + '"'
