# JSON for RLlink bodies, written by hand for exact control over numbers: every float
# with 9 significant digits (a float32 survives the round trip, and the gateway keeps
# float32), every int as an int (a Discrete action must arrive as an integer), NaN and
# infinities as NaN / Infinity, which the gateway refuses with a clear bad_json error
# rather than reading a made-up number. Same output as the Godot 3 kit's writer.
extends RefCounted

const LN10 = 2.302585092994046
const LIST_TYPES = [
	TYPE_ARRAY,
	TYPE_PACKED_FLOAT32_ARRAY,
	TYPE_PACKED_FLOAT64_ARRAY,
	TYPE_PACKED_INT32_ARRAY,
	TYPE_PACKED_INT64_ARRAY,
	TYPE_PACKED_STRING_ARRAY,
]


static func write(value) -> String:
	if typeof(value) in LIST_TYPES:
		var items := PackedStringArray()
		for item in value:
			items.append(write(item))
		return "[" + ",".join(items) + "]"
	match typeof(value):
		TYPE_NIL:
			return "null"
		TYPE_BOOL:
			return "true" if value else "false"
		TYPE_INT:
			return str(value)
		TYPE_FLOAT:
			return number(value)
		TYPE_STRING, TYPE_STRING_NAME:
			return JSON.stringify(str(value))  # quoted and escaped
		TYPE_DICTIONARY:
			var parts := PackedStringArray()
			for key in value:
				parts.append(JSON.stringify(str(key)) + ":" + write(value[key]))
			return "{" + ",".join(parts) + "}"
		TYPE_VECTOR2:
			return "[%s,%s]" % [number(value.x), number(value.y)]
		TYPE_VECTOR3:
			return "[%s,%s,%s]" % [number(value.x), number(value.y), number(value.z)]
	return JSON.stringify(str(value))


# A float with 9 significant digits, trailing zeros dropped ("0.1", "2.5e-12", "-3.0").
static func number(x: float) -> String:
	if is_nan(x):
		return "NaN"
	if is_inf(x):
		return "Infinity" if x > 0 else "-Infinity"
	if x == 0.0:
		return "0.0"
	var exponent := int(floor(log(absf(x)) / LN10))
	if exponent < -5 or exponent > 15:
		var mantissa := x / pow(10.0, exponent)
		if absf(mantissa) >= 10.0:  # log10 rounded down one too few
			mantissa /= 10.0
			exponent += 1
		elif absf(mantissa) < 1.0:
			mantissa *= 10.0
			exponent -= 1
		return _trim("%.8f" % mantissa) + "e" + str(exponent)
	var places := maxi(1, 8 - exponent)
	return _trim(("%." + str(places) + "f") % x)


static func _trim(text: String) -> String:
	if text.find(".") < 0:
		return text
	var end := text.length()
	while end > 0 and text[end - 1] == "0":
		end -= 1
	if text[end - 1] == ".":
		end += 1  # keep one zero: "3.0"
	return text.substr(0, end)
