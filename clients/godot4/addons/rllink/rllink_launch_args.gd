# The command-line arguments a gateway gives the game builds it launches (--env-path;
# RLLINK.md "Launching games"): where to connect and how fast to run. Read from both
# OS.get_cmdline_args() and the user arguments after `--` (OS.get_cmdline_user_args()),
# each as "--name value" or "--name=value". Unknown arguments are the game's own.
extends RefCounted

const HOST = "--rllink-host"
const PORT = "--rllink-port"
const TOKEN = "--rllink-token"
const TIME_SCALE = "--rllink-time-scale"
const ENV_INDEX = "--rllink-env-index"
const NAMES = [HOST, PORT, TOKEN, TIME_SCALE, ENV_INDEX]


# This process's launch arguments: see parse().
static func from_command_line() -> Dictionary:
	var args: Array = Array(OS.get_cmdline_args()) + Array(OS.get_cmdline_user_args())
	return parse(args)


# {"host"?, "port"?, "token"?, "time_scale"?, "env_index"?} for the --rllink-* arguments
# given, or {"error": text} naming a malformed one (a port that is not 1-65535, a time
# scale that is not a number above 0).
static func parse(args: Array) -> Dictionary:
	var found := {}
	var i := 0
	while i < args.size():
		var name := str(args[i])
		i += 1
		if not name.begins_with("--rllink-"):
			continue
		var value = null
		var equals := name.find("=")
		if equals >= 0:
			value = name.substr(equals + 1)
			name = name.substr(0, equals)
		elif i < args.size():
			value = str(args[i])
			i += 1
		if not name in NAMES:
			continue  # a newer gateway's argument: not ours to refuse
		if value == null:
			return {"error": "%s needs a value" % name}
		var problem := _take(found, name, value)
		if problem != "":
			return {"error": problem}
	return found


# Puts one argument's value into found; why it is malformed ("" if fine).
static func _take(found: Dictionary, name: String, value: String) -> String:
	match name:
		HOST:
			found["host"] = value
		TOKEN:
			found["token"] = value
		PORT:
			if not value.is_valid_int() or int(value) < 1 or int(value) > 65535:
				return "%s must be a port number 1-65535, got '%s'" % [name, value]
			found["port"] = int(value)
		TIME_SCALE:
			if not value.is_valid_float() or float(value) <= 0.0:
				return "%s must be a number above 0, got '%s'" % [name, value]
			found["time_scale"] = float(value)
		ENV_INDEX:
			if not value.is_valid_int() or int(value) < 0:
				return "%s must be a whole number from 0, got '%s'" % [name, value]
			found["env_index"] = int(value)
	return ""
