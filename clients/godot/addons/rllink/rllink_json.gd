# JSON for RLlink bodies. Godot 3's to_json() prints floats with 6 decimals
# (1e-7 becomes 0, 0.123456789 becomes 0.123457): observations, rewards and log-probs
# would lose precision on the way. This writer prints every float with 9 significant
# digits (a float32 survives the round trip exactly, and the gateway keeps float32),
# and ints as ints (a Discrete action must arrive as an integer).
extends Reference

const LN10 = 2.302585092994046


static func write(value) -> String:
	match typeof(value):
		TYPE_NIL:
			return "null"
		TYPE_BOOL:
			return "true" if value else "false"
		TYPE_INT:
			return str(value)
		TYPE_REAL:
			return number(value)
		TYPE_STRING:
			return to_json(value)  # quoted and escaped
		TYPE_DICTIONARY:
			var parts = PoolStringArray()
			for key in value:
				parts.append(to_json(str(key)) + ":" + write(value[key]))
			return "{" + parts.join(",") + "}"
		TYPE_ARRAY, TYPE_REAL_ARRAY, TYPE_INT_ARRAY, TYPE_STRING_ARRAY:
			var items = PoolStringArray()
			for item in value:
				items.append(write(item))
			return "[" + items.join(",") + "]"
		TYPE_VECTOR2:
			return "[" + number(value.x) + "," + number(value.y) + "]"
		TYPE_VECTOR3:
			return "[" + number(value.x) + "," + number(value.y) + "," + number(value.z) + "]"
	return to_json(str(value))


# A float with 9 significant digits, trailing zeros dropped ("0.1", "2.5e-12", "-3.0").
# NaN and infinities are written as NaN / Infinity, which the gateway refuses with a
# clear bad_json error rather than reading a made-up number.
static func number(x: float) -> String:
	if is_nan(x):
		return "NaN"
	if is_inf(x):
		return "Infinity" if x > 0 else "-Infinity"
	if x == 0.0:
		return "0.0"
	var exponent = int(floor(log(abs(x)) / LN10))
	if exponent < -5 or exponent > 15:
		var mantissa = x / pow(10.0, exponent)
		if abs(mantissa) >= 10.0:  # log10 rounded down one too few
			mantissa /= 10.0
			exponent += 1
		elif abs(mantissa) < 1.0:
			mantissa *= 10.0
			exponent -= 1
		return _trim("%.8f" % mantissa) + "e" + str(exponent)
	var places = int(max(1, 8 - exponent))
	return _trim(("%." + str(places) + "f") % x)


static func _trim(text: String) -> String:
	if text.find(".") < 0:
		return text
	var end = text.length()
	while end > 0 and text[end - 1] == "0":
		end -= 1
	if text[end - 1] == ".":
		end += 1  # keep one zero: "3.0"
	return text.substr(0, end)
