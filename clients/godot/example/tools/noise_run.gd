# Plays episodes with the addon's local session (rllink_local_session.gd: the GDScript
# runtime, the sampler, pink noise) against a canned gateway, for the tests of its
# exploration noise (tests/test_godot_kit.py):
#
#   godot3-server --path clients/godot/example -s res://tools/noise_run.gd -- gateway.json EPISODES STEPS [GREEDY_FROM GREEDY_TO]
#
# gateway.json holds {"set_config": SET_CONFIG, "set_state": SET_STATE}: the client's
# config, and the reply to every GET_STATE (nothing goes over a network). Each episode
# plays STEPS steps on a zero observation; steps GREEDY_FROM..GREEDY_TO-1 of each play
# with explore off. Prints "STEP <episode> <step> <json action as sampled> <logp>" per
# step. Exits 0, or 1 with "ERROR <text>".
extends SceneTree

const LocalSession = preload("res://addons/rllink/rllink_local_session.gd")
const Request = preload("res://addons/rllink/rllink_request.gd")
const JsonWriter = preload("res://addons/rllink/rllink_json.gd")
const OnnxRun = preload("res://tools/onnx_run.gd")  # its _json: numbers as the tests parse them


# The real client's config and module lookup; every request is answered at once.
class CannedClient extends "res://addons/rllink/rllink_client.gd":
	var set_state = {}

	func request(message: Dictionary):
		var req = Request.new(message, "SET_STATE")
		req.finish(set_state)
		return req

	func poll() -> void:
		pass

	func flush() -> void:
		pass


func _init() -> void:
	var args = Array(OS.get_cmdline_args())
	var separator = args.find("--")
	args = args.slice(separator + 1, args.size() - 1) if separator >= 0 and separator + 1 < args.size() else []
	if args.size() < 3:
		_stop("usage: -s res://tools/noise_run.gd -- gateway.json EPISODES STEPS [GREEDY_FROM GREEDY_TO]")
		return
	var file = File.new()
	if file.open(args[0], File.READ) != OK:
		_stop("cannot read " + args[0])
		return
	var gateway = parse_json(file.get_as_text())
	file.close()
	var greedy_from = int(args[3]) if args.size() > 4 else -1
	var greedy_to = int(args[4]) if args.size() > 4 else -1
	var client = CannedClient.new()
	client.config = gateway.set_config
	client.set_state = gateway.set_state
	var session = LocalSession.new(client, 7)
	session.training_enabled = false  # nothing is sent back
	var obs = []
	for _i in range(int(gateway.set_config.observation_space.shape[0])):
		obs.append(0.0)
	for episode in range(int(args[1])):
		for t in range(int(args[2])):
			session.explore = t < greedy_from or t >= greedy_to
			session.begin_step(obs)
			var result = session.poll_step()
			if result == null or result.has("error"):
				_stop("no action: %s" % str(result))
				return
			var chunk = session._chunk  # what the gateway would train on: the sample, its log-prob
			print("STEP %d %d %s %s" % [episode, t, OnnxRun._json(chunk.actions[-1]), JsonWriter.number(chunk.action_logp[-1])])
		session.end_episode(obs, false, true)
	quit(0)


func _stop(text: String) -> void:
	print("ERROR " + text)
	quit(1)
