# Local mode: the game runs the policy itself (RLlib's own way). GET_STATE brings the
# policy (ONNX), which rllink_mlp_policy.gd runs in GDScript; actions are sampled here
# with their log-probs; every env_steps_per_sample steps the experience goes back with
# EPISODES_AND_GET_STATE, whose SET_STATE (after the training step, force_on_policy)
# brings the next policy. One round trip per sample instead of one per step, at the
# price of running the network in GDScript.
#
# Action masks (a module with the gateway's action_masking): each step's mask goes into
# the model (its second input, action_mask: the forbidden actions get probability 0)
# and into the chunk's action_mask, the mask the action was chosen under (all ones for
# a step the game gave none), which the gateway trains with and checks the action by.
#
# Evaluation episodes (RLLINK.md "Evaluation episodes"): with SET_CONFIG's
# evaluation_interval N > 0, every Nth episode of this agent (the Nth, 2Nth, ...) is
# played with the distribution's mode and every chunk of it carries evaluation: true, so
# the gateway never trains on it and reports its return apart. Only when training_enabled
# (the chunks are what the gateway evaluates).
#
# Memory (RLLINK.md "Recurrent policies"; SET_CONFIG's state_size > 0): the agent's
# state goes into the model with each observation (state_in: zeros at an episode's
# start) and the model's state_out is fed with the next one; a new model version keeps
# the state. Every chunk carries state_in, the state fed with its first observation,
# so the gateway can run its LSTM from there.
#
# Exploration noise (SET_CONFIG's action_noise "pink", a SAC module's default): a Box
# action's N(0, 1) draws come from this agent's pink noise (rllink_pink_noise.gd), drawn
# anew at each episode's start like the state and advanced every step, a step played
# with the mode too; "white" or absent: the sampler's own draws, new each step.
#
# A dropped connection costs nothing but time: the experience not yet acknowledged is
# sent again once reconnected.
extends "res://addons/rllink/rllink_session.gd"

const PolicyRunner = preload("res://addons/rllink/rllink_policy_runner.gd")

var runner
var models_loaded := 0  # SET_STATE models loaded: one the runner already runs is not loaded again

var _chunk = null  # the open episode's current chunk
var _finished: Array = []  # chunks not yet acknowledged by a SET_STATE
var _steps_since_sample := 0
var _episodes_played := 0  # episodes this agent finished (for evaluation_interval)
var _episode_id := ""
var _obs = null
var _mask: Array = []  # the step's action mask (empty: all allowed)
var _state: Array = []  # a recurrent module's state to feed with _obs ([]: feed-forward)
var _noise = null  # the episode's pink noise (rllink_pink_noise.gd); null: white draws
var _state_message = null  # GET_STATE or EPISODES_AND_GET_STATE under way
var _state_request = null
var _retries := 0
var _retry_when_ready := false
var _lost = null
var _loaded_file := ""  # the SET_STATE model (base64 of its gzip) the runner runs


func _init(rllink_client, seed_value := 0) -> void:
	client = rllink_client
	runner = PolicyRunner.new(seed_value)


func mode() -> String:
	return "local"


func action_space() -> Dictionary:
	return runner.module.get("action_space", {})


func episode_id() -> String:
	return _episode_id


# mask: the step's action mask, one 0/1 per logit (empty: all allowed).
func begin_step(obs, mask := []) -> void:
	_obs = obs.duplicate() if typeof(obs) == TYPE_ARRAY else obs
	_mask = mask
	_retries = 0
	if not runner.is_loaded():
		_ask({"type": "GET_STATE"})
		return
	var per_sample := int(client.config.get("env_steps_per_sample", 500))
	if training_enabled and _steps_since_sample >= per_sample:
		if _chunk != null and not _chunk.actions.is_empty():
			_chunk.obs.append(_obs)  # completes its last step; the episode goes on in a new chunk
			_finished.append(_chunk)
			_chunk = _new_chunk(_obs)
		_ask(
			{
				"type": "EPISODES_AND_GET_STATE",
				"episodes": _finished,
				"env_steps": _steps_since_sample
			}
		)


func _ask(message: Dictionary) -> void:
	_retry_when_ready = false
	_state_message = message
	_state_request = client.request(message)
	client.flush()


func poll_step():
	client.poll()
	if _retry_when_ready:
		if client.is_ready():
			_ask(_state_message)
		elif client.is_failed():
			return {"error": client.last_error}
		elif client.state_name() == "idle":
			return {"error": _lost}
		return null
	if _state_request != null:
		if not _state_request.done:
			return null
		var error = _state_arrived()
		if error != null:
			return {"error": error} if typeof(error) == TYPE_DICTIONARY else null
	return _act()


# The GET_STATE or EPISODES_AND_GET_STATE is done: load its policy. null when it
# did; an error Dictionary; or true while the request goes again after a reconnect.
func _state_arrived():
	var error = _state_request.error
	if error != null:
		if (
			error.code in [RLlinkClient.CONNECTION_CLOSED, RLlinkClient.TIMEOUT]
			and _retries < max_retries
		):
			_retries += 1
			reconnects += 1
			_lost = error
			_retry_when_ready = true
			return true
		_state_request = null
		return error
	var reply = _state_request.reply
	_state_request = null
	var load_error = _load(reply)
	if load_error != null:
		return load_error
	if _state_message.type == "EPISODES_AND_GET_STATE":
		_finished = []
		_steps_since_sample = 0
		if _chunk != null:
			_chunk.weights_seq_no = weights_seq_no
	return null


func _act() -> Dictionary:
	if _chunk == null:  # a new episode: an evaluation one?
		var interval := int(client.config.get("evaluation_interval", 0))
		evaluating = training_enabled and is_evaluation_episode(_episodes_played, interval)
		_state = runner.zero_state()  # a new episode starts with no memory
		_noise = runner.new_noise()  # and with its own pink noise
	elif _state.size() != runner.state_size:  # cannot happen with one gateway's modules
		_state = runner.zero_state()
	var draws: Array = _noise.step() if _noise != null else []  # every step: the drift goes on
	var decided: Dictionary = runner.act(_obs, _mask, explore and not evaluating, _state, draws)
	if decided.has("error"):
		decided.error["request"] = ""
		return decided
	if _chunk == null:
		_episode_id = client.new_episode_id()
		_chunk = _new_chunk(_obs)
	elif not _chunk.actions.is_empty():
		_chunk.obs.append(_obs)
	if not decided.mask.is_empty():
		if not _chunk.has("action_mask"):
			_chunk["action_mask"] = []
		_chunk.action_mask.append(decided.mask)
	_chunk.actions.append(decided.sampled)
	_chunk.rewards.append(0.0)
	_chunk.action_logp.append(decided.logp)
	_state = decided.state  # fed with the next observation (after the chunk took its state_in)
	_steps_since_sample += 1
	env_steps += 1
	return {"action": decided.action, "weights_seq_no": weights_seq_no}


func add_reward(reward: float) -> void:
	if _chunk != null and not _chunk.rewards.is_empty():
		_chunk.rewards[-1] += reward


func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	if _chunk != null and not _chunk.actions.is_empty():
		_chunk.obs.append(final_obs.duplicate() if typeof(final_obs) == TYPE_ARRAY else final_obs)
		_chunk.is_terminated = terminated
		_chunk.is_truncated = truncated
		if training_enabled:
			_finished.append(_chunk)
		_episodes_played += 1
	_chunk = null
	_episode_id = ""
	_state = []  # the next episode starts from zeros (_act)
	_noise = null  # and draws its own noise (_act)


func _new_chunk(first_obs) -> Dictionary:
	var chunk := {
		"obs": [first_obs],
		"actions": [],
		"rewards": [],
		"action_logp": [],
		"is_terminated": false,
		"is_truncated": false,
		"episode_id": _episode_id,
		"weights_seq_no": weights_seq_no
	}
	if agent_id != "":
		chunk["agent_id"] = agent_id
	if module_id != "":
		chunk["module_id"] = module_id
	if evaluating:
		chunk["evaluation"] = true  # every chunk of an evaluation episode says so
	if runner.state_size > 0:  # the state fed with first_obs: zeros or the last state_out
		chunk["state_in"] = _state.duplicate()
	return chunk


# Whether an agent's next episode, after `played` of its own, is an evaluation one: the
# Nth, 2Nth, ... of every N = evaluation_interval (0: none).
static func is_evaluation_episode(played: int, interval: int) -> bool:
	return interval > 0 and played % interval == interval - 1


# A SET_STATE's model for this agent's module, into the runtime; an error Dictionary if
# it cannot be run here.
func _load(set_state: Dictionary):
	var module: Dictionary = client.module_for(agent_id, module_id)
	var packed := RLlinkClient.packed_onnx(set_state, module.module_id)
	# An off-policy learner's version outlasts many requests: the same model is not loaded again.
	if runner.is_loaded() and packed == _loaded_file:
		weights_seq_no = int(set_state.get("weights_seq_no", weights_seq_no))
		return null
	var model: PackedByteArray = RLlinkClient.decode_onnx(set_state, module.module_id)
	var problem: String = runner.load_model(model, module)
	if problem != "":
		var text := "cannot run the gateway's policy locally: %s" % problem
		if text.find("thin mode") < 0:
			text += " (use thin mode)"
		return error_info("model_error", text, _state_message.type)
	_loaded_file = packed
	models_loaded += 1
	weights_seq_no = int(set_state.get("weights_seq_no", weights_seq_no))
	return null
