# The example's command line: the arguments after `--` (OS.get_cmdline_args()).
#   godot3-server --path clients/godot/example -- --host 127.0.0.1 --port 5555 --target-return 200
extends Reference

const USAGE = """usage: godot3-server --path clients/godot/example -- [--host 127.0.0.1] [--port 5555]
         [--token T] [--target-return 450] [--max-seconds 300] [--max-env-steps 0]
         [--inference thin|local|heuristic] [--transport tcp|ws] [--envs 1] [--seed 0]
         [--async] [--speedup 0] [--tls [--tls-cert cert.pem] [--tls-hostname name]]
         [--env cartpole|masked-pick] [--record-demos demos.jsonl] [--episodes 0]
  --port       the gateway's tcp_port (tcp) or http_port (ws)
  --envs N     N carts in the scene, sharing one connection
  --async      agents do not wait inside a tick for their action (as in an HTML5 export)
  --speedup S  physics ticks per second = 60 x S; 0: as fast as the gateway answers
  --env        masked-pick: pick the best of 6 items, 3 forbidden each step, with action
               masks (a gateway with observations box [12], actions discrete 6, action_masking)
  --inference  heuristic: a scripted controller plays; its actions are logged (LOG_ACTION)
               to the gateway, which trains on them (--host "": no gateway at all)
  --record-demos FILE  heuristic: append each episode to FILE as demonstrations (the
               gateway's demos format)
  --episodes N stop after N episodes (exit 0); 0: no limit
exit codes: 0 target reached (or --episodes played), 1 time or step budget spent first,
            2 bad arguments, 3 the gateway refused us or could not be reached (its code and
            message printed), or the demonstrations file cannot be written,
            4 a forbidden action was taken (masked-pick)"""



# {"options": {...}} or {"error": "..."} or {"help": true}.
static func parse(argv: Array) -> Dictionary:
	var args = argv
	var separator = args.find("--")
	if separator >= 0:
		args = args.slice(separator + 1, args.size() - 1) if separator + 1 < args.size() else []
	var options = {
		"host": "127.0.0.1", "port": 5555, "token": "", "target_return": 450.0, "max_seconds": 300.0,
		"max_env_steps": 0, "inference": "thin", "transport": "tcp", "envs": 1, "seed": 0,
		"async": false, "speedup": 0.0, "tls": false, "tls_cert": "", "tls_hostname": "", "env": "cartpole",
		"record_demos": "", "episodes": 0,
	}
	var i = 0
	while i < args.size():
		var flag = str(args[i])
		i += 1
		if flag == "--usage":  # Godot itself takes --help and -h, even after --
			return {"help": true}
		if flag == "--tls" or flag == "--async":
			options[flag.substr(2, flag.length())] = true
			continue
		if i >= args.size():
			return {"error": flag + " needs a value"}
		var value = str(args[i])
		i += 1
		match flag:
			"--host", "--token", "--tls-hostname", "--record-demos":
				options[flag.substr(2, flag.length()).replace("-", "_")] = value
			"--tls-cert":
				options.tls_cert = value
				options.tls = true
			"--port", "--envs", "--seed", "--max-env-steps", "--episodes":
				if not value.is_valid_integer():
					return {"error": "%s takes a whole number, not '%s'" % [flag, value]}
				options[flag.substr(2, flag.length()).replace("-", "_")] = int(value)
			"--target-return", "--max-seconds", "--speedup":
				if not value.is_valid_float():
					return {"error": "%s takes a number, not '%s'" % [flag, value]}
				options[flag.substr(2, flag.length()).replace("-", "_")] = float(value)
			"--inference":
				if not value in ["thin", "local", "heuristic"]:
					return {"error": "--inference is thin, local or heuristic, not '%s'" % value}
				options.inference = value
			"--transport":
				if not value in ["tcp", "ws"]:
					return {"error": "--transport is tcp or ws, not '%s'" % value}
				options.transport = value
			"--env":
				if not value in ["cartpole", "masked-pick"]:
					return {"error": "--env is cartpole or masked-pick, not '%s'" % value}
				options.env = value
			_:
				return {"error": "unknown option " + flag}
	if options.envs < 1:
		return {"error": "--envs must be at least 1"}
	if options.port < 1 or options.port > 65535:
		return {"error": "--port must be 1-65535"}
	if options.episodes < 0:
		return {"error": "--episodes must be 0 (no limit) or more"}
	if options.record_demos != "" and options.inference != "heuristic":
		return {"error": "--record-demos records heuristic play: add --inference heuristic"}
	if options.record_demos != "" and options.envs != 1:
		return {"error": "--record-demos records one agent: use --envs 1"}
	if options.host == "" and options.inference != "heuristic":
		return {"error": "--host is empty: only --inference heuristic plays without a gateway"}
	return {"options": options}
