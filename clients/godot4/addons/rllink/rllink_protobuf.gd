# Reads protobuf's wire format one field at a time: as much as the ONNX reader needs
# (varints, 32-bit floats, length-delimited bytes). Fields: next() -> field number and
# wire type, then read the value with varint(), float32(), bytes() or skip().
extends RefCounted

var data := PackedByteArray()
var pos := 0
var end := 0
var field := 0
var wire_type := 0
var error_message := ""


func _init(bytes: PackedByteArray, start := 0, stop := -1) -> void:
	data = bytes
	pos = start
	end = bytes.size() if stop < 0 else stop


# The next field's key; false at the end (or after an error: see error_message).
func next() -> bool:
	if pos >= end or error_message != "":
		return false
	var key := varint()
	field = key >> 3
	wire_type = key & 7
	return error_message == ""


func varint() -> int:
	var result := 0
	var shift := 0
	while true:
		if pos >= end:
			error_message = "truncated protobuf (a varint runs past the end)"
			return 0
		var b := data[pos]
		pos += 1
		result |= (b & 0x7f) << shift
		if (b & 0x80) == 0:
			return result
		shift += 7
		if shift > 63:
			error_message = "bad varint in protobuf"
			return 0
	return result


func float32() -> float:
	if wire_type != 5 or pos + 4 > end:
		error_message = "expected a 32-bit float field"
		return 0.0
	var value := data.decode_float(pos)
	pos += 4
	return value


# A length-delimited field's [start, stop) in data (a sub-message: read it with a new
# reader over the same bytes, no copy).
func span() -> Array:
	if wire_type != 2:
		error_message = "expected a length-delimited field"
		return [pos, pos]
	var length := varint()
	if length < 0 or pos + length > end:
		error_message = "truncated protobuf (a field runs past the end)"
		return [pos, pos]
	var start := pos
	pos += length
	return [start, pos]


func bytes() -> PackedByteArray:
	var s := span()
	return data.slice(s[0], s[1])


func string() -> String:
	return bytes().get_string_from_utf8()


# A reader over a length-delimited field (a sub-message).
func sub_reader():
	var s := span()
	return get_script().new(data, s[0], s[1])


func skip() -> void:
	match wire_type:
		0:
			varint()
		1:
			pos += 8
		2:
			span()
		5:
			pos += 4
		_:
			error_message = "unsupported protobuf wire type %d" % wire_type
