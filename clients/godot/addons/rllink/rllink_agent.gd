# RLlinkAgent: the node a game adds to train an agent through an RLlink gateway, in the
# spirit of ML-Agents' Agent and Godot RL Agents' AIController. Extend it and fill in
# the hooks:
#
#   extends "res://addons/rllink/rllink_agent.gd"
#   func get_obs() -> Array: return [position.x, velocity.x]   # always the same length
#   func set_action(action) -> void: push = action             # int (discrete) or Array (box)
#   func get_reward() -> float: var r = reward; reward = 0.0; return r   # since the last decision
#   func is_done() -> bool: return fell                        # a terminal state
#   func reset() -> void: fell = false; position = Vector2()   # a new episode
#   func get_action_mask() -> Array: return [1, 0, 1]           # optional: the actions allowed now
#
# Every decision_period physics ticks it closes the last step (get_reward, is_done /
# is_truncated / max_episode_steps: END_EPISODE and reset() when it ended), then asks
# for an action on get_obs() (and get_action_mask()) and hands it to set_action().
# Between decisions the game keeps acting on the last action.
#
# Action masks (the gateway's action_masking): get_action_mask() returns the actions
# allowed at this decision, one 0/1 (or false/true) per logit: n for a discrete space,
# sum(nvec) for a multi-discrete one, sub-action 0's first; empty (the default): all
# allowed. The action chosen is always an allowed one, in both modes (thin: sent with
# GET_ACTION; local: fed to the model and recorded in the experience sent).
#
# inference "thin" (default): the gateway chooses every action (one round trip per
# decision, no model in the game). "local": the game runs the downloaded policy in
# GDScript and sends its experience every env_steps_per_sample steps (see README).
# "heuristic": get_heuristic_action() plays (a human, a script); logged with LOG_ACTION
# when a gateway is connected (host empty: none), so the gateway trains on it; with
# record_demos_path, each episode is also written to that demonstrations file, the
# gateway's `demos` format, gateway or not.
#
# blocking (desktop default): the tick that asks for an action waits for it (~0.3 ms
# on localhost), so every action acts on the observation it was chosen for. Without
# it (always in HTML5 exports, which cannot block) the action arrives a tick or more
# later, and the game keeps its previous action meanwhile.
#
# Evaluation episodes (RLLINK.md): while training, every Nth episode (SET_CONFIG's
# evaluation_interval) is played with the policy's most likely action and never trained
# on; is_evaluation_episode says so. Local mode: the agent's Nth, 2Nth... episode, marked
# evaluation in every chunk sent; thin mode: the gateway decides (EPISODE_STARTED's
# evaluation). Heuristic play never is one.
#
# Errors: a dropped connection reconnects by itself and the agent goes on (a new
# gateway episode from the current state); an episode the gateway timed out restarts.
# Anything else (unauthorized, too_many_episodes, a wrong observation size, a gateway
# that stays unreachable) stops the agent and emits gateway_error({code, message,
# details, request}); start() again once handled.
extends Node

signal episode_finished(episode_return, steps)  # after END_EPISODE, before reset()
signal policy_updated(weights_seq_no)           # a new policy version chose an action
signal gateway_error(info)                      # the agent stopped: {code, message, details, request}

const RLlinkClient = preload("res://addons/rllink/rllink_client.gd")
const ThinSession = preload("res://addons/rllink/rllink_thin_session.gd")
const LocalSession = preload("res://addons/rllink/rllink_local_session.gd")
const HeuristicSession = preload("res://addons/rllink/rllink_heuristic_session.gd")
const DemoRecorder = preload("res://addons/rllink/rllink_demo_recorder.gd")

export var host = "127.0.0.1"
export var port = 5555                      # the gateway's tcp_port (tcp) or http_port (ws)
export var token = ""                       # the gateway's auth_token, if its auth is on
export(String, "tcp", "ws") var transport = "tcp"   # HTML5 exports always use ws
export var ws_path = "/rllink"
export var use_tls = false
export(String, FILE, "*.pem,*.crt") var tls_certificate = ""  # a certificate to trust (self-signed)
export var tls_hostname = ""                # the name on the gateway's certificate (empty: host)
export(String, "thin", "local", "heuristic") var inference = "thin"
export var record_demos_path = ""           # heuristic: append each episode to this demonstrations file
export var agent_id = ""                    # picks the module through the gateway's policy_mapping
export var module_id = ""                   # the module to play (wins over the mapping)
export var explore = true                   # false: the most likely action (evaluation)
export var training_enabled = true          # false: act, but the gateway does not train on it
export var max_episode_steps = 0            # truncate an episode after this many decisions (0: never)
export(int, 1, 1000) var decision_period = 1
export var blocking = true
export var autostart = true                 # start() when the node is ready
export var seed_value = 0                   # local mode: the action sampler's seed

# The connection; set it before start() to share one among several agents.
var client = null
var session = null                          # rllink_thin_session.gd or rllink_local_session.gd
var module = {}                             # the module this agent plays (spaces, distribution)
var episode_return = 0.0
var episode_steps = 0                       # decisions in this episode
var episodes = 0
var weights_seq_no = -1
var last_action = null
# Read-only: the episode under way is an evaluation one (the mode plays, the gateway never
# trains on it). Set at an episode's first decision, kept through episode_finished.
var is_evaluation_episode setget _read_only, _get_is_evaluation_episode

var _running = false
var _step_open = false                      # an action was asked for and has not arrived
var _ticks = 0
var _owns_client = false
var _recorder = null                        # rllink_demo_recorder.gd while heuristic play is recorded


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


# -- Control --------------------------------------------------------------------------------

func _ready() -> void:
	if autostart:
		start()


# Connect (if need be) and start the episode loop from reset().
func start() -> void:
	if client == null and (inference != "heuristic" or host != ""):
		client = RLlinkClient.new()
		client.host = host
		client.port = port
		client.token = token
		client.transport = transport
		client.ws_path = ws_path
		client.use_tls = use_tls
		client.tls_certificate_path = ProjectSettings.globalize_path(tls_certificate) if tls_certificate != "" else ""
		client.tls_hostname = tls_hostname
		_owns_client = true
	if OS.has_feature("JavaScript"):
		blocking = false  # a browser cannot wait inside a frame
	match inference:
		"local":
			session = LocalSession.new(client, seed_value)
		"heuristic":
			session = HeuristicSession.new(client, funcref(self, "get_heuristic_action"))
			if not _start_recording():
				return
			session.recorder = _recorder
		_:
			session = ThinSession.new(client)
	session.agent_id = agent_id
	session.module_id = module_id
	session.explore = explore
	session.training_enabled = training_enabled
	if client != null:
		client.connect_to_gateway()
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


# Stop deciding (the connection stays; start() goes on with a new episode).
func stop() -> void:
	_running = false


func is_running() -> bool:
	return _running


func _get_is_evaluation_episode() -> bool:
	return session != null and session.is_evaluation_episode()


func _read_only(_value) -> void:
	push_error("RLlinkAgent: is_evaluation_episode is read-only")


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
	if not _step_open and (_ticks - 1) % max(decision_period, 1) != 0:
		return
	decide()


# One decision: close the last step, ask for an action, act. The physics tick calls it;
# a game that drives its own loop (turn-based, or faster than real time) may call it
# directly instead, with autostart on and the node's physics processing off.
func decide() -> void:
	if not _running:
		return
	if not _step_open:
		if inference != "heuristic" and not _connected():  # heuristic play waits for no gateway
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
		emit_signal("policy_updated", weights_seq_no)
	episode_steps += 1
	last_action = result.action if inference == "heuristic" else _game_action(result.action)
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
	if not client.is_ready():
		return false
	module = client.module_for(agent_id, module_id)
	return true


# Reward and end of the last step; false if the agent was stopped meanwhile.
func _close_step() -> bool:
	var reward = get_reward()
	episode_return += reward
	session.add_reward(reward)
	var terminated = is_done()
	var truncated = is_truncated() or (max_episode_steps > 0 and episode_steps >= max_episode_steps)
	if not (terminated or truncated):
		return true
	session.end_episode(get_obs(), terminated, truncated)
	episodes += 1
	var finished_return = episode_return
	var finished_steps = episode_steps
	episode_return = 0.0
	episode_steps = 0
	emit_signal("episode_finished", finished_return, finished_steps)
	if not _running:
		return false
	reset()
	return true


func _fail(info) -> void:
	_running = false
	_step_open = false
	if info == null:
		info = {"code": "connection_closed", "message": "the connection is closed", "details": null, "request": ""}
	if get_signal_connection_list("gateway_error").empty():
		printerr("RLlink: %s [%s] %s" % [name, info.code, info.message])
	emit_signal("gateway_error", info)


# get_action_mask() as 0/1 ints (JSON stays small; anything but 0/1 is left for the
# checks to refuse).
func _action_mask() -> Array:
	var mask = get_action_mask()
	if mask.empty():
		return mask
	var ints = []
	for value in mask:
		if typeof(value) == TYPE_BOOL:
			ints.append(1 if value else 0)
		elif typeof(value) in [TYPE_INT, TYPE_REAL] and (value == 0 or value == 1):
			ints.append(int(value))
		else:
			ints.append(value)
	return ints


# The gateway's action (JSON numbers are floats) as the game acts on it.
func _game_action(action):
	if module.empty() and client.is_ready():
		module = client.module_for(agent_id, module_id)
	var kind = str(module.get("action_space", {}).get("type", "discrete"))
	if kind == "discrete":
		return int(action)
	if kind == "multi_discrete":
		var ints = []
		for a in action:
			ints.append(int(a))
		return ints
	return action
