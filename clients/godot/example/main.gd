# CartPole trained through an RLlink gateway, headless or in a window:
#
#   godot3-server --path clients/godot/example -- --host 127.0.0.1 --port 5555 --target-return 200
#
# Builds the scene from the command line (cli.gd): one connection (rllink_client.gd)
# shared by --envs cart-pole agents (cartpole_agent.gd), thin mode by default. Prints
# progress every 20 episodes and exits 0 once the mean return of the last 20 episodes
# reaches the target, 1 if the time or step budget runs out first, 2 for bad
# arguments, 3 when the gateway refuses us or cannot be reached (code and message).
#
# --env masked-pick plays masked_pick_agent.gd instead (action masks): it exits 4 at
# the first forbidden action, and prints how many decisions it checked at the end.
# --inference heuristic --record-demos FILE records the scripted controller's episodes as
# demonstrations (with --host "": no gateway at all); --episodes N stops after N.
#
# Evaluation episodes (the gateway's evaluation_interval: played with the mode, never
# trained on) count in the episodes and env steps but not in the mean return; the last
# line says how many there were.
extends Node2D

const Cli = preload("res://cli.gd")
const RLlinkClient = preload("res://addons/rllink/rllink_client.gd")
const CartPoleAgent = preload("res://cartpole_agent.gd")
const CartPoleEnv = preload("res://cartpole_env.gd")
const MaskedPickAgent = preload("res://masked_pick_agent.gd")
const MaskedPickEnv = preload("res://masked_pick_env.gd")

const WINDOW = 20

var options = {}
var client = null
var agents = []
var recent = []
var episodes = 0
var env_steps = 0
var evaluation_episodes = 0     # of the episodes, those played as evaluation ones
var evaluation_steps = 0
var evaluation_return = 0.0
var started_msec = 0
var finished = false
var announced = false


func _ready() -> void:
	var parsed = Cli.parse(OS.get_cmdline_args())
	if parsed.has("help"):
		print(Cli.USAGE)
		_quit(0)
		return
	if parsed.has("error"):
		printerr("error: " + parsed.error + "\n" + Cli.USAGE)
		_quit(2)
		return
	options = parsed.options
	_set_speed(options.speedup)
	if options.host != "":
		client = _new_client()
	started_msec = OS.get_ticks_msec()
	for i in range(options.envs):
		var agent
		if options.env == "masked-pick":
			agent = MaskedPickAgent.new()
			agent.name = "Picker%d" % i
			agent.env = MaskedPickEnv.new(options.seed + i)
		else:
			agent = CartPoleAgent.new()
			agent.name = "Cart%d" % i
			agent.env = CartPoleEnv.new(options.seed + i)
		agent.client = client  # one connection for every cart (null: heuristic with no gateway)
		agent.host = options.host
		agent.inference = options.inference
		agent.record_demos_path = options.record_demos
		agent.blocking = not options.async
		agent.seed_value = options.seed + i
		agent.connect("episode_finished", self, "_on_episode_finished", [agent])
		agent.connect("gateway_error", self, "_on_gateway_error", [agent])
		agents.append(agent)
		add_child(agent)


func _new_client():
	var made = RLlinkClient.new()
	made.host = options.host
	made.port = options.port
	made.token = options.token
	made.transport = options.transport
	made.use_tls = options.tls
	made.tls_certificate_path = options.tls_cert
	made.tls_hostname = options.tls_hostname
	if options.max_seconds > 0:  # never spend longer reconnecting than the whole run may take
		made.reconnect_timeout_s = min(made.reconnect_timeout_s, options.max_seconds)
	made.connect("note", self, "_on_note")
	made.connect("connected", self, "_on_connected")
	return made


# Headless, run the physics as fast as the gateway answers: many ticks per second, and
# no idle sleep between frames (each tick waits for its action anyway).
func _set_speed(speedup: float) -> void:
	if speedup > 0:
		Engine.iterations_per_second = int(60 * speedup)
	else:
		Engine.iterations_per_second = 100000
		OS.low_processor_usage_mode_sleep_usec = 200 if options.async else 0


func _process(_delta: float) -> void:
	if finished:
		return
	if _forbidden_taken():
		return
	if _budget_spent():
		_finish(1)
		return
	if OS.get_name() != "Server" and options.env == "cartpole":
		update()  # redraw the carts in a window


func _on_connected(config: Dictionary) -> void:
	if announced:
		return
	announced = true
	print("gateway: observations %s, actions %s, env_steps_per_sample %s, protocol %s; inference: %s, transport: %s, envs: %d%s" % [
		to_json(config.get("observation_space")), to_json(config.get("action_space")),
		str(config.get("env_steps_per_sample")), str(config.get("protocol_version", "?")),
		options.inference, options.transport, options.envs, ", async" if options.async else ""])


func _on_note(text: String) -> void:
	print("rllink: " + text)


func _on_episode_finished(episode_return: float, steps: int, agent) -> void:
	if finished or _forbidden_taken():
		return
	if options.record_demos != "":
		print(to_json({"episode": episodes + 1, "return": episode_return, "steps": steps}))
	episodes += 1
	env_steps += steps
	if agent.is_evaluation_episode:  # the finished one's (it holds until the next one's first decision)
		evaluation_episodes += 1
		evaluation_steps += steps
		evaluation_return += episode_return
	else:  # the target is the training episodes'
		recent.append(episode_return)
		if recent.size() > WINDOW:
			recent.pop_front()
	var reached = recent.size() == WINDOW and _mean() >= options.target_return
	if episodes % WINDOW == 0 or reached:
		# Connections made again after a drop (the client's count: a step that never saw the
		# drop, cut between two requests, still counts it).
		var reconnects = client.connection_number - 1 if client != null else 0
		print("v%d  env steps %d  episodes %d  mean return (last %d) %.1f  %.1fs%s" % [
			agent.weights_seq_no, env_steps, episodes, recent.size(), _mean(), _elapsed(),
			"  reconnects %d" % reconnects if reconnects > 0 else ""])
	if reached:
		print("reached the target: mean return %.1f >= %s after %d episodes, %d env steps, %.1fs" % [
			_mean(), str(options.target_return), episodes, env_steps, _elapsed()])
		_finish(0)
	elif options.episodes > 0 and episodes >= options.episodes:
		print("played %d episodes, %d env steps, %.1fs" % [episodes, env_steps, _elapsed()])
		_finish(0)
	elif _budget_spent():
		_finish(1)


func _on_gateway_error(info: Dictionary, _agent) -> void:
	if finished:
		return
	var code = str(info.get("code", "error"))
	var request = str(info.get("request", ""))
	var ours = code in [RLlinkClient.CONNECTION_CLOSED, RLlinkClient.TIMEOUT, RLlinkClient.BAD_FRAME,
		RLlinkClient.UNEXPECTED_REPLY, RLlinkClient.TLS_ERROR]
	var what = "cannot talk to the gateway" if ours else "the gateway refused us"
	if code == "file_error":
		what = "cannot record"
	printerr("error: %s: [%s] %s%s" % [
		what, code, str(info.get("message", "")),
		" (request %s)" % request if request != "" else ""])
	_finish(3)


# masked-pick: a forbidden action ends the run (exit 4); true once it has.
func _forbidden_taken() -> bool:
	if options.env != "masked-pick":
		return false
	for agent in agents:
		if agent.env.forbidden_taken > 0:
			printerr("error: %s took a forbidden action: %s" % [agent.name, agent.env.last_forbidden])
			_finish(4)
			return true
	return false


func _budget_spent() -> bool:
	var spent = (options.max_seconds > 0 and _elapsed() >= options.max_seconds) \
		or (options.max_env_steps > 0 and env_steps >= options.max_env_steps)
	if spent:
		print("budget spent before the target: mean return (last %d) %.1f < %s after %d episodes, %d env steps, %.1fs" % [
			recent.size(), _mean(), str(options.target_return), episodes, env_steps, _elapsed()])
	return spent


func _finish(code: int) -> void:
	finished = true
	if options.env == "masked-pick":
		var decisions = 0
		var forbidden = 0
		for agent in agents:
			decisions += agent.env.total_steps
			forbidden += agent.env.forbidden_taken
		print("masked-pick: %d decisions, %d forbidden actions taken" % [decisions, forbidden])
	if options.inference == "local":
		var loaded = 0
		for agent in agents:
			loaded += agent.session.models_loaded if agent.session != null else 0
		print("models loaded %d, the last version %d" % [loaded, agents[0].weights_seq_no])
	if evaluation_episodes > 0:
		print("evaluation: %d episodes, %d env steps, mean return %.1f" % [
			evaluation_episodes, evaluation_steps, evaluation_return / evaluation_episodes])
	for agent in agents:
		agent.stop()
	if client != null:
		client.close()  # sends what is queued (the last END_EPISODE)
	_quit(code)


func _quit(code: int) -> void:
	set_process(false)
	get_tree().quit(code)


func _mean() -> float:
	if recent.empty():
		return 0.0
	var total = 0.0
	for r in recent:
		total += r
	return total / recent.size()


func _elapsed() -> float:
	return (OS.get_ticks_msec() - started_msec) / 1000.0


# In a window: each cart as a box on a rail with its pole.
func _draw() -> void:
	if options.get("env") != "cartpole":
		return
	var size = get_viewport_rect().size
	for i in range(agents.size()):
		var state = agents[i].env.state
		var y = (i + 1) * size.y / (agents.size() + 1)
		var scale = size.x / (2 * CartPoleEnv.X_THRESHOLD + 1.0)
		var x = size.x / 2 + state[0] * scale
		draw_line(Vector2(0, y), Vector2(size.x, y), Color(0.5, 0.5, 0.5))
		draw_rect(Rect2(x - 25, y - 12, 50, 24), Color(0.2, 0.4, 0.8))
		var tip = Vector2(x + sin(state[2]) * 2 * CartPoleEnv.LENGTH * scale, y - cos(state[2]) * 2 * CartPoleEnv.LENGTH * scale)
		draw_line(Vector2(x, y), tip, Color(0.8, 0.6, 0.3), 4.0)
