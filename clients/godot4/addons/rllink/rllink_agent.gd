# RLlinkAgent: the node a game adds to train an agent through an RLlink gateway, in the
# spirit of ML-Agents' Agent and Godot RL Agents' AIController. Extend it and fill in
# the hooks:
#
#   extends RLlinkAgent        (or: extends "res://addons/rllink/rllink_agent.gd")
#   func get_obs() -> Array: return [position.x, velocity.x]   # always the same length
#   func set_action(action) -> void: push = action             # int (discrete) or Array (box)
#   func get_reward() -> float: var r = reward; reward = 0.0; return r   # since the last decision
#   func is_done() -> bool: return fell                        # a terminal state
#   func reset() -> void: fell = false; position = Vector2()   # a new episode
#   func get_action_mask() -> Array: return [1, 0, 1]           # optional: the actions allowed now
#   func get_heuristic_action(): return 1 if Input.is_action_pressed("ui_right") else 0
#
# Every decision_period physics ticks it closes the last step (get_reward, is_done /
# is_truncated / max_episode_steps: END_EPISODE and reset() when it ended), then asks
# for an action on get_obs() (and get_action_mask()) and hands it to set_action().
# Between decisions the game keeps acting on the last action.
#
# inference: "thin" (default: the gateway acts, GET_ACTION each decision), "local" (the
# game runs SET_STATE's ONNX in GDScript and sends its experience every
# env_steps_per_sample steps), "model_file" (a bundled .onnx plays, no gateway at all),
# "heuristic" (get_heuristic_action() plays; logged with LOG_ACTION when connected, so
# the gateway trains on it; with record_demos_path, each episode is also written to that
# demonstrations file, the gateway's `demos` format, gateway or not). See the README.
#
# A gateway that launched the game (--env-path) passes --rllink-host, --rllink-port,
# --rllink-token and --rllink-time-scale, which win over the exported settings, and
# --rllink-env-index (env_index, added to seed_value).
#
# Errors: a dropped connection reconnects by itself and the agent goes on (a new
# gateway episode from the current state); an episode the gateway timed out restarts.
# Anything else (unauthorized, too_many_episodes, a wrong observation size, a gateway
# that stays unreachable, a bad launch argument) stops the agent and emits
# gateway_error({code, message, details, request}); start() again once handled.
class_name RLlinkAgent
extends Node

signal episode_finished(episode_return: float, steps: int)  # after END_EPISODE, before reset()
signal policy_updated(weights_seq_no: int)  # a new policy version chose an action
signal gateway_error(info: Dictionary)  # the agent stopped: {code, message, details, request}

const RLlinkClient = preload("res://addons/rllink/rllink_client.gd")
const ThinSession = preload("res://addons/rllink/rllink_thin_session.gd")
const LocalSession = preload("res://addons/rllink/rllink_local_session.gd")
const ModelFileSession = preload("res://addons/rllink/rllink_model_file_session.gd")
const HeuristicSession = preload("res://addons/rllink/rllink_heuristic_session.gd")
const DemoRecorder = preload("res://addons/rllink/rllink_demo_recorder.gd")
const LaunchArgs = preload("res://addons/rllink/rllink_launch_args.gd")
const Speed = preload("res://addons/rllink/rllink_speed.gd")

@export_group("Gateway")
@export var host := "127.0.0.1"
@export var port := 5555  # the gateway's tcp_port (tcp) or http_port (ws)
@export var token := ""  # the gateway's auth_token, if its auth is on
@export_enum("tcp", "ws") var transport := "tcp"  # web exports always use ws
@export var ws_path := "/rllink"
@export var use_tls := false
@export_file("*.pem", "*.crt") var tls_certificate := ""  # a certificate to pin (self-signed)
@export var tls_hostname := ""  # the name on the gateway's certificate (empty: host)

@export_group("Inference")
@export_enum("thin", "local", "model_file", "heuristic") var inference := "thin"
@export_file("*.onnx") var model_path := ""  # model_file: the .onnx to play
@export var explore := true  # false: the most likely action (evaluation, a shipped game)
@export var training_enabled := true  # false: act, but the gateway does not train on it
@export var seed_value := 0  # local and model_file: the action sampler's seed

@export_group("Agent")
@export var agent_id := ""  # picks the module through the gateway's policy_mapping
@export var module_id := ""  # the module to play (wins over the mapping)
@export var max_episode_steps := 0  # truncate an episode after this many decisions (0: never)
@export_range(1, 1000) var decision_period := 1
@export var blocking := true  # the tick that asks for an action waits for it (desktop)
@export var autostart := true  # start() when the node is ready
@export var time_scale := 1.0  # game speed: Engine.time_scale and physics ticks together

@export_group("Demonstrations")
# heuristic mode: append each finished episode to this file (user:// or an absolute path)
# as RLlink episode chunks, one JSON object a line: the gateway's `demos` format. Empty: off.
@export var record_demos_path := ""

@export_group("Spaces")
# The spaces this game declares in GET_CONFIG (RLLINK.md "Spaces the game declares"),
# e.g. {"type": "box", "shape": [4]} and {"type": "discrete", "n": 2}; empty: none.
@export var observation_space := {}
@export var action_space := {}

# The connection; set it before start() to share one among several agents.
var client = null
var session = null  # one of the rllink_*_session.gd
var env_index := -1  # --rllink-env-index when the gateway launched this game, else -1
var episode_return := 0.0
var episode_steps := 0  # decisions in this episode
var episodes := 0
var weights_seq_no := -1
var last_action = null
# Read-only: the episode under way is an evaluation one (the gateway's evaluation_interval:
# played with the distribution's mode, never trained on, its return reported apart), from
# its first decision (before set_action) until the next episode's first; so an
# episode_finished handler reads it for the episode that just ended. thin: the gateway
# says so; local: every Nth episode of this agent. Never in model_file or heuristic play.
var is_evaluation_episode: bool:
	get:
		return session != null and session.evaluating
	set(_value):
		push_error("RLlinkAgent: is_evaluation_episode is read-only")

var _running := false
var _step_open := false  # an action was asked for and has not arrived
var _ticks := 0
var _owns_client := false
var _launch_applied := false
var _recorder = null  # rllink_demo_recorder.gd while heuristic play is recorded

# -- The hooks: override them ---------------------------------------------------------------


# The observation: numbers, always the gateway's observation space's size.
func get_obs() -> Array:
	push_error("RLlinkAgent: override get_obs()")
	return []


# Act: an int for a discrete space, an Array of ints (multi-discrete) or floats (box,
# already clipped to its bounds).
func set_action(_action) -> void:
	pass


# The reward earned since the last decision.
func get_reward() -> float:
	return 0.0


# The episode reached a terminal state (the pole fell, the goal was reached).
func is_done() -> bool:
	return false


# The episode was cut short without a terminal state (a time limit of the game's own;
# max_episode_steps is the built-in one).
func is_truncated() -> bool:
	return false


# Put the game in the state a new episode starts from. Called by start() and after
# every episode.
func reset() -> void:
	pass


# The actions allowed at this decision (called right after get_obs()): one 0/1 or
# false/true per logit; empty: all allowed. Only for a module with the gateway's
# action_masking (a mask sent to any other is refused: invalid_message).
func get_action_mask() -> Array:
	return []


# heuristic mode: the action the game's own controls choose now (a human, a script),
# in the form set_action() takes.
func get_heuristic_action():
	push_error("RLlinkAgent: inference is heuristic: override get_heuristic_action()")
	return 0


# The value of a gateway environment parameter (SET_CONFIG's env_params, updated by
# every SET_STATE that carries them: a curriculum's lesson); default when absent.
func get_env_param(param_name: String, default = null):
	if client == null:
		return default
	return client.env_params.get(param_name, default)


# -- Control --------------------------------------------------------------------------------


func _ready() -> void:
	if autostart:
		start()


# Connect (if need be) and start the episode loop from reset().
func start() -> void:
	var launch := LaunchArgs.from_command_line()
	if launch.has("error"):
		_fail({"code": "bad_argument", "message": launch.error, "details": null, "request": ""})
		return
	_apply_launch(launch)
	if time_scale != 1.0:
		Speed.apply(time_scale)
	if OS.has_feature("web"):
		blocking = false  # a browser cannot wait inside a frame
	if inference == "model_file":
		session = ModelFileSession.new(model_path, seed_value)
	else:
		if client == null and (inference != "heuristic" or host != ""):
			client = _new_client()
			_owns_client = true
		if client != null:
			client.declare_spaces(module_id, observation_space, action_space)
			client.connect_to_gateway()
		match inference:
			"local":
				session = LocalSession.new(client, seed_value)
			"heuristic":
				session = HeuristicSession.new(client, get_heuristic_action)
				if not _start_recording():
					return
				session.recorder = _recorder
			_:
				session = ThinSession.new(client)
	session.agent_id = agent_id
	session.module_id = module_id
	session.explore = explore
	session.training_enabled = training_enabled
	episode_return = 0.0
	episode_steps = 0
	_step_open = false
	_ticks = 0
	reset()
	_running = true


# heuristic mode with record_demos_path: open the demonstrations file (once: start() may
# come again); false, and the agent stopped saying why, when it cannot be written.
func _start_recording() -> bool:
	if record_demos_path == "" or _recorder != null:
		return true
	var recorder = DemoRecorder.new(record_demos_path)
	if not recorder.is_open():
		_fail({"code": "file_error", "message": recorder.error_message, "details": null, "request": ""})
		return false
	recorder.agent_id = agent_id
	recorder.module_id = module_id
	_recorder = recorder
	return true


# The launch arguments win over the exported settings (once: start() may come again).
func _apply_launch(launch: Dictionary) -> void:
	if _launch_applied:
		return
	_launch_applied = true
	host = launch.get("host", host)
	port = launch.get("port", port)
	token = launch.get("token", token)
	time_scale = launch.get("time_scale", time_scale)
	if launch.has("env_index"):
		env_index = launch.env_index
		seed_value += env_index


func _new_client():
	var made = RLlinkClient.new()
	made.host = host
	made.port = port
	made.token = token
	made.transport = transport
	made.ws_path = ws_path
	made.use_tls = use_tls
	if tls_certificate != "":
		made.tls_certificate_path = ProjectSettings.globalize_path(tls_certificate)
	made.tls_hostname = tls_hostname
	return made


# Stop deciding (the connection stays; start() goes on with a new episode).
func stop() -> void:
	_running = false


func is_running() -> bool:
	return _running


# Stop and close the connection this agent opened (the gateway ends its open episode).
func close() -> void:
	_running = false
	if client != null and _owns_client:
		client.close()
	if _recorder != null:
		_recorder.close()
		_recorder = null


func _exit_tree() -> void:
	close()


# -- The loop -------------------------------------------------------------------------------


func _physics_process(_delta: float) -> void:
	if not _running:
		return
	_ticks += 1
	if not _step_open and (_ticks - 1) % maxi(decision_period, 1) != 0:
		return
	decide()


# One decision: close the last step, ask for an action, act. The physics tick calls it;
# a game that drives its own loop (turn-based, or faster than real time) may call it
# directly instead, with autostart on and the node's physics processing off.
func decide() -> void:
	if not _running:
		return
	if not _step_open:
		if session.needs_gateway() and not _connected():
			return
		if episode_steps > 0 and not _close_step():
			return
		session.begin_step(get_obs(), _action_mask())
		_step_open = true
		if not blocking:
			return  # the action comes at a later tick
	var result = session.wait_step() if blocking else session.poll_step()
	if result == null:
		return
	_step_open = false
	if result.has("error"):
		_fail(result.error)
		return
	if result.weights_seq_no != weights_seq_no:
		weights_seq_no = result.weights_seq_no
		policy_updated.emit(weights_seq_no)
	episode_steps += 1
	last_action = _game_action(result.action)
	set_action(last_action)


# The client's handshake is done (blocking: waits for it); false while it is not.
func _connected() -> bool:
	if client.is_ready():
		return true
	if blocking:
		client.wait_ready()
	else:
		client.poll()
	if client.is_failed():
		_fail(client.last_error)
	return client.is_ready()


# Reward and end of the last step; false if the agent was stopped meanwhile.
func _close_step() -> bool:
	var reward := get_reward()
	episode_return += reward
	session.add_reward(reward)
	var terminated := is_done()
	var truncated := (
		is_truncated() or (max_episode_steps > 0 and episode_steps >= max_episode_steps)
	)
	if not (terminated or truncated):
		return true
	session.end_episode(get_obs(), terminated, truncated)
	episodes += 1
	var finished_return := episode_return
	var finished_steps := episode_steps
	episode_return = 0.0
	episode_steps = 0
	episode_finished.emit(finished_return, finished_steps)
	if not _running:
		return false
	reset()
	return true


func _fail(info) -> void:
	_running = false
	_step_open = false
	if info == null:
		info = {
			"code": "connection_closed",
			"message": "the connection is closed",
			"details": null,
			"request": ""
		}
	if gateway_error.get_connections().is_empty():
		printerr("RLlink: %s [%s] %s" % [name, info.code, info.message])
	gateway_error.emit(info)


# get_action_mask() as 0/1 ints (JSON stays small; anything but 0/1 is left for the
# checks to refuse).
func _action_mask() -> Array:
	var mask := get_action_mask()
	if mask.is_empty():
		return mask
	var ints: Array = []
	for value in mask:
		if typeof(value) == TYPE_BOOL:
			ints.append(1 if value else 0)
		elif typeof(value) in [TYPE_INT, TYPE_FLOAT] and (value == 0 or value == 1):
			ints.append(int(value))
		else:
			ints.append(value)
	return ints


# The action as the game acts on it: JSON numbers are floats, so a discrete action
# becomes an int, a multi-discrete one an Array of ints; a box's floats stay.
func _game_action(action):
	var kind := str(session.action_space().get("type", ""))
	if kind == "discrete":
		return int(action)
	if kind == "multi_discrete":
		var ints: Array = []
		for a in action:
			ints.append(int(a))
		return ints
	return action
