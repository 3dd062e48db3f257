# The example's command line: the user arguments after `--` (OS.get_cmdline_user_args()).
#   godot4 --headless --path clients/godot4/example -- --host 127.0.0.1 --port 5555
extends RefCounted

const USAGE = """usage: godot4 --headless --path clients/godot4/example -- [--host 127.0.0.1]
         [--port 5555] [--token T] [--target-return 450] [--max-seconds 300]
         [--max-env-steps 0] [--inference thin|local|model_file|heuristic]
         [--model-path model.onnx] [--transport tcp|ws] [--envs 1] [--seed 0] [--async]
         [--speedup 0] [--tls [--tls-cert cert.pem] [--tls-hostname name]]
         [--env cartpole|masked-pick] [--record-demos demos.jsonl] [--episodes 0]
  --port        the gateway's tcp_port (tcp) or http_port (ws)
  --inference   thin: the gateway acts; local: the game runs SET_STATE's model;
                model_file: --model-path plays, no gateway; heuristic: a scripted
                controller plays and its actions are logged (LOG_ACTION) to train on
  --envs N      N carts in the scene, sharing one connection
  --async       agents do not wait inside a tick for their action (as in a web export)
  --speedup S   the agents' time_scale (Engine.time_scale and physics ticks x S);
                0: physics ticks as fast as the gateway answers
  --env         masked-pick: pick the best of 6 items, 3 forbidden each step, with action
                masks (the gateway needs action_masking and its spaces); default: the
                scene's (main.tscn: cartpole, masked_pick.tscn: masked-pick)
  --record-demos FILE   heuristic: append each episode to FILE as demonstrations (the
                gateway's demos format); with --host "" no gateway is used at all
  --episodes N  stop after N episodes (exit 0); 0: no limit
exit codes: 0 target reached (or --episodes played), 1 time or step budget spent first,
            2 bad arguments, 3 the gateway refused us or could not be reached (its code
            and message printed), or the demonstrations file cannot be written,
            4 a forbidden action was taken (masked-pick)"""

const INFERENCES = ["thin", "local", "model_file", "heuristic"]
const ENVS = ["cartpole", "masked-pick"]


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
		"env": "",  # "": the scene's
		"record_demos": "",
		"episodes": 0,
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
	if options.episodes < 0:
		return {"error": "--episodes must be 0 (no limit) or more"}
	if options.port < 1 or options.port > 65535:
		return {"error": "--port must be 1-65535"}
	if options.inference == "model_file" and options.model_path == "":
		return {"error": "--inference model_file needs --model-path"}
	if options.record_demos != "" and options.inference != "heuristic":
		return {"error": "--record-demos records heuristic play: add --inference heuristic"}
	if options.record_demos != "" and options.envs != 1:
		return {"error": "--record-demos records one agent: use --envs 1"}
	if options.host == "" and options.inference != "heuristic":
		return {"error": "--host is empty: only --inference heuristic plays without a gateway"}
	return {"options": options}


# One flag's value into options; why it is refused ("" if fine).
static func _take(options: Dictionary, flag: String, value: String) -> String:
	var key := flag.substr(2).replace("-", "_")
	match flag:
		"--host", "--token", "--tls-hostname", "--model-path", "--record-demos":
			options[key] = value
		"--tls-cert":
			options.tls_cert = value
			options.tls = true
		"--port", "--envs", "--seed", "--max-env-steps", "--episodes":
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
		"--env":
			if not value in ENVS:
				return "--env is cartpole or masked-pick, not '%s'" % value
			options.env = value
		"--transport":
			if not value in ["tcp", "ws"]:
				return "--transport is tcp or ws, not '%s'" % value
			options.transport = value
		_:
			return "unknown option " + flag
	return ""
