# The example's command line: the user arguments after `--` (OS.get_cmdline_user_args()).
#   godot4 --headless --path clients/godot4/example -- --host 127.0.0.1 --port 5555
extends RefCounted

const USAGE = """usage: godot4 --headless --path clients/godot4/example -- [--host 127.0.0.1]
         [--port 5555] [--token T] [--target-return 450] [--max-seconds 300]
         [--max-env-steps 0] [--inference thin|local|model_file|heuristic]
         [--model-path model.onnx] [--transport tcp|ws] [--envs 1] [--seed 0] [--async]
         [--speedup 0] [--tls [--tls-cert cert.pem] [--tls-hostname name]]
  --port        the gateway's tcp_port (tcp) or http_port (ws)
  --inference   thin: the gateway acts; local: the game runs SET_STATE's model;
                model_file: --model-path plays, no gateway; heuristic: a scripted
                controller plays and its actions are logged (LOG_ACTION) to train on
  --envs N      N carts in the scene, sharing one connection
  --async       agents do not wait inside a tick for their action (as in a web export)
  --speedup S   the agents' time_scale (Engine.time_scale and physics ticks x S);
                0: physics ticks as fast as the gateway answers
exit codes: 0 target reached, 1 time or step budget spent first, 2 bad arguments,
            3 the gateway refused us or could not be reached (its code and message printed)"""

const INFERENCES = ["thin", "local", "model_file", "heuristic"]


# {"options": {...}} or {"error": "..."} or {"help": true}.
static func parse(argv: Array) -> Dictionary:
	var args := argv
	var separator := args.find("--")
	if separator >= 0:  # arguments that still hold the engine's own
		args = args.slice(separator + 1)
	var options := {
		"host": "127.0.0.1",
		"port": 5555,
		"token": "",
		"target_return": 450.0,
		"max_seconds": 300.0,
		"max_env_steps": 0,
		"inference": "thin",
		"model_path": "",
		"transport": "tcp",
		"envs": 1,
		"seed": 0,
		"async": false,
		"speedup": 0.0,
		"tls": false,
		"tls_cert": "",
		"tls_hostname": "",
	}
	var i := 0
	while i < args.size():
		var flag := str(args[i])
		i += 1
		if flag == "--usage":  # Godot itself takes --help and -h
			return {"help": true}
		if flag == "--tls" or flag == "--async":
			options[flag.substr(2)] = true
			continue
		if i >= args.size():
			return {"error": flag + " needs a value"}
		var problem := _take(options, flag, str(args[i]))
		i += 1
		if problem != "":
			return {"error": problem}
	if options.envs < 1:
		return {"error": "--envs must be at least 1"}
	if options.port < 1 or options.port > 65535:
		return {"error": "--port must be 1-65535"}
	if options.inference == "model_file" and options.model_path == "":
		return {"error": "--inference model_file needs --model-path"}
	return {"options": options}


# One flag's value into options; why it is refused ("" if fine).
static func _take(options: Dictionary, flag: String, value: String) -> String:
	var key := flag.substr(2).replace("-", "_")
	match flag:
		"--host", "--token", "--tls-hostname", "--model-path":
			options[key] = value
		"--tls-cert":
			options.tls_cert = value
			options.tls = true
		"--port", "--envs", "--seed", "--max-env-steps":
			if not value.is_valid_int():
				return "%s takes a whole number, not '%s'" % [flag, value]
			options[key] = int(value)
		"--target-return", "--max-seconds", "--speedup":
			if not value.is_valid_float():
				return "%s takes a number, not '%s'" % [flag, value]
			options[key] = float(value)
		"--inference":
			if not value in INFERENCES:
				return "--inference is thin, local, model_file or heuristic, not '%s'" % value
			options.inference = value
		"--transport":
			if not value in ["tcp", "ws"]:
				return "--transport is tcp or ws, not '%s'" % value
			options.transport = value
		_:
			return "unknown option " + flag
	return ""
