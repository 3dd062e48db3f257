# Local mode: the game runs the policy itself (RLlib's own way). GET_STATE brings the
# policy (ONNX), which rllink_mlp_policy.gd runs in GDScript; actions are sampled here
# with their log-probs; every env_steps_per_sample steps the experience goes back with
# EPISODES_AND_GET_STATE, whose SET_STATE (after the training step, force_on_policy)
# brings the next policy. One round trip per sample instead of one per step, at the
# price of running the network in GDScript (about 1 ms per step for a 64x64 MLP).
#
# Action masks (a module with the gateway's action_masking): each step's mask goes into
# the model (its second input, action_mask: the forbidden actions get probability 0)
# and into the chunk's action_mask, the mask the action was chosen under (all ones for
# a step the game gave none), which the gateway trains with and checks the action by.
#
# Evaluation episodes (RLLINK.md): with SET_CONFIG's evaluation_interval N > 0, this
# agent's Nth, 2Nth... episode is played with the distribution's mode (as explore off)
# and every chunk of it carries evaluation: true (never trained on, reported apart).
#
# Memory (a recurrent module: SET_CONFIG's state_size > 0, model.use_lstm at the
# gateway): the model also takes state_in and gives state_out. This agent's state starts
# each episode at zeros, each step's state_out is fed with the next observation, and a
# new model version keeps it; every chunk carries state_in, the state fed with its
# first observation (a chunk that goes on with an episode after an
# EPISODES_AND_GET_STATE needs it: the gateway trains the LSTM from there).
#
# Exploration noise (SET_CONFIG's action_noise "pink", a SAC module's default): a Box
# action's N(0, 1) draws come from this agent's pink noise (rllink_pink_noise.gd), drawn
# anew at each episode's start like the state and advanced every step; "white" or
# absent: the sampler's own draws, new each step.
#
# Same interface as rllink_thin_session.gd. A dropped connection costs nothing but
# time: the experience not yet acknowledged is sent again once reconnected.
extends Reference

const MlpPolicy = preload("res://addons/rllink/rllink_mlp_policy.gd")
const ActionSampler = preload("res://addons/rllink/rllink_action_sampler.gd")
const PinkNoise = preload("res://addons/rllink/rllink_pink_noise.gd")

var client                      # rllink_client.gd
var agent_id = ""
var module_id = ""
var explore = true
var training_enabled = true     # false: act with the policy, send nothing back
var max_retries = 3

var policy = MlpPolicy.new()
var sampler
var module = {}                 # the module this agent plays (client.module_for)
var weights_seq_no = -1
var env_steps = 0
var reconnects = 0
var episodes_played = 0         # episodes finished (evaluation_interval counts them)
var models_loaded = 0           # SET_STATE models loaded: one the runtime already runs is not loaded again
var state_size = 0              # the module's recurrent state's floats (SET_CONFIG's state_size); 0: no memory
var state = []                  # a recurrent module's state, fed with the next observation
var noise = null                # the episode's pink noise (rllink_pink_noise.gd); null: white draws

var _chunk = null               # the open episode's current chunk
var _finished = []              # chunks not yet acknowledged by a SET_STATE
var _steps_since_sample = 0
var _episode_id = ""
var _evaluating = false         # the latest episode is an evaluation one
var _obs = null
var _mask = []                  # the step's action mask (empty: all allowed)
var _state_message = null       # GET_STATE or EPISODES_AND_GET_STATE under way
var _state_request = null
var _retries = 0
var _retry_when_ready = false
var _lost = null
var _loaded_file = ""           # the SET_STATE model (base64 of its gzip) the runtime runs


func _init(rllink_client, seed_value := 0) -> void:
	client = rllink_client
	sampler = ActionSampler.new(seed_value)


func mode() -> String:
	return "local"


func episode_id() -> String:
	return _episode_id


func is_evaluation_episode() -> bool:
	return _evaluating


# Whether the episode starting now is an evaluation one: the Nth, 2Nth... of this agent,
# N = SET_CONFIG's evaluation_interval (0: none); never when nothing is sent back.
func _evaluation_turn() -> bool:
	var interval = int(client.config.get("evaluation_interval", 0))
	return training_enabled and interval > 0 and episodes_played % interval == interval - 1


# mask: the step's action mask, one 0/1 per logit (empty: all allowed).
func begin_step(obs, mask := []) -> void:
	_obs = obs.duplicate() if typeof(obs) == TYPE_ARRAY else obs
	_mask = mask
	_retries = 0
	if not policy.is_loaded():
		_ask({"type": "GET_STATE"})
	elif training_enabled and _steps_since_sample >= int(client.config.get("env_steps_per_sample", 500)):
		if _chunk != null and not _chunk.actions.empty():
			_chunk.obs.append(_obs)  # completes its last step; the episode goes on in a new chunk
			_finished.append(_chunk)
			_chunk = _new_chunk(_obs)  # its state_in: the state this observation is fed with
		_ask({"type": "EPISODES_AND_GET_STATE", "episodes": _finished, "env_steps": _steps_since_sample})


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
		var error = _state_request.error
		if error != null:
			if error.code in [client.CONNECTION_CLOSED, client.TIMEOUT] and _retries < max_retries:
				_retries += 1
				reconnects += 1
				_lost = error
				_retry_when_ready = true
				return poll_step()
			_state_request = null
			return {"error": error}
		var reply = _state_request.reply
		_state_request = null
		var load_error = _load(reply)
		if load_error != null:
			return {"error": load_error}
		if _state_message.type == "EPISODES_AND_GET_STATE":
			_finished = []
			_steps_since_sample = 0
			if _chunk != null:
				_chunk.weights_seq_no = weights_seq_no
	return _act()


func wait_step():
	var deadline = OS.get_ticks_msec() + int((client.reply_timeout_s + client.reconnect_timeout_s + client.connect_timeout_s) * 1000 * (max_retries + 1))
	while true:
		var result = poll_step()
		if result != null:
			return result
		if OS.get_ticks_msec() > deadline:
			return {"error": {"code": client.TIMEOUT, "message": "no policy within the client's timeouts", "details": null, "request": _state_message.type}}
		OS.delay_usec(client.POLL_SLEEP_USEC)


func _act() -> Dictionary:
	var space = module.get("action_space", {})
	var mask_error = _mask_error(space)
	if mask_error != "":
		return {"error": {"code": "invalid_message", "message": mask_error, "details": {"field": "action_mask"}, "request": ""}}
	if _chunk == null:
		_episode_id = client.new_episode_id()
		_evaluating = _evaluation_turn()
		state = policy.zero_state()  # a new episode starts with no memory
		noise = _new_noise()  # and with its own pink noise
		_chunk = _new_chunk(_obs)
	elif not _chunk.actions.empty():
		_chunk.obs.append(_obs)
	var greedy = _evaluating or not explore  # the most likely action (a gSDE model's noise-free output)
	var outputs = []
	if state_size > 0:
		var stepped = policy.step(_obs, state, _mask, greedy)
		if stepped.empty():
			return {"error": {"code": "model_error", "message": "the policy did not run on state_in of %d floats (state_size %d)" % [state.size(), state_size],
				"details": null, "request": ""}}
		outputs = stepped.output
		state = stepped.state  # fed with the next observation
	else:
		outputs = policy.run(_obs, _mask, greedy)
	var distribution = str(module.get("action_distribution", "categorical"))
	var draws = []  # empty: the sampler draws white noise
	if noise != null:
		draws = noise.step()  # every step, a greedy one too: the drift goes on
	var sampled = sampler.sample(outputs, distribution, space, not greedy, draws)
	if policy.is_masked():
		if not _chunk.has("action_mask"):
			_chunk["action_mask"] = []
		_chunk.action_mask.append(_mask if not _mask.empty() else _ones(policy.mask_width))
	_chunk.actions.append(sampled.action)
	_chunk.rewards.append(0.0)
	_chunk.action_logp.append(sampled.logp)
	_steps_since_sample += 1
	env_steps += 1
	var action = sampled.action
	if distribution == "gaussian":
		action = ActionSampler.clip(action, space)  # the sample is trained on, the clipped one acted on
	return {"action": action, "weights_seq_no": weights_seq_no}


# The game's mask, checked as the gateway would check it in a chunk (a bad one would
# have it refuse the whole sample later); "" if fine.
func _mask_error(space: Dictionary) -> String:
	if _mask.empty():
		return ""
	if not policy.is_masked():
		return "get_action_mask() gave a mask, but module '%s' takes no action masks (set the gateway's action_masking)" % str(module.get("module_id", ""))
	return ActionSampler.mask_error(_mask, space)


# The pink noise of an episode starting now (its processes drawn anew), or null where
# this agent's module samples white noise (action_noise "white" or absent, no Box).
func _new_noise():
	var dim = PinkNoise.pink_dim(module)
	return PinkNoise.new(sampler.rng, dim) if dim > 0 else null


static func _ones(count: int) -> Array:
	var ones = []
	for i in range(count):
		ones.append(1)
	return ones


func add_reward(reward: float) -> void:
	if _chunk != null and not _chunk.rewards.empty():
		_chunk.rewards[-1] += reward


func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	if _chunk != null and not _chunk.actions.empty():
		_chunk.obs.append(final_obs.duplicate() if typeof(final_obs) == TYPE_ARRAY else final_obs)
		_chunk.is_terminated = terminated
		_chunk.is_truncated = truncated
		if training_enabled:
			_finished.append(_chunk)
		episodes_played += 1
	_chunk = null
	_episode_id = ""
	noise = null  # the next episode draws its own (_act)


func _new_chunk(first_obs) -> Dictionary:
	var chunk = {
		"obs": [first_obs], "actions": [], "rewards": [], "action_logp": [],
		"is_terminated": false, "is_truncated": false,
		"episode_id": _episode_id, "weights_seq_no": weights_seq_no
	}
	if agent_id != "":
		chunk["agent_id"] = agent_id
	if module_id != "":
		chunk["module_id"] = module_id
	if _evaluating:
		chunk["evaluation"] = true
	if state_size > 0:
		chunk["state_in"] = state.duplicate()  # the state fed with first_obs
	return chunk


# A SET_STATE's model for this agent's module, into the runtime; an error Dictionary if
# it cannot be run here.
func _load(set_state: Dictionary):
	module = client.module_for(agent_id, module_id)
	var packed = client.packed_onnx(set_state, module.module_id)
	if policy.is_loaded() and packed == _loaded_file:  # an off-policy learner's version outlasts many requests
		weights_seq_no = int(set_state.get("weights_seq_no", weights_seq_no))
		return null
	var model = client.decode_onnx(set_state, module.module_id)
	var outputs = module.get("onnx_output_names", [])
	var shape = module.get("observation_space", {}).get("shape", [])
	var int_shape = []
	for n in shape:
		int_shape.append(int(n))
	var mask_input = module.get("onnx_action_mask_input_name")
	if not policy.load_model(model, str(module.get("onnx_input_name", "")), str(outputs[0]) if outputs.size() > 0 else "", int_shape,
			mask_input if typeof(mask_input) == TYPE_STRING else ""):
		var text = "cannot run the gateway's policy locally: %s" % policy.error_message
		if text.find("thin mode") < 0:
			text += " (use thin mode)"
		return {"code": "model_error", "message": text, "details": null, "request": _state_message.type}
	var expected = int(module.get("state_size", client.config.get("state_size", 0)))
	if policy.state_size != expected:
		var text = "module '%s' has state_size %d in SET_CONFIG, but its model's state_in takes %d" % [str(module.module_id), expected, policy.state_size]
		return {"code": "model_error", "message": text, "details": null, "request": _state_message.type}
	if policy.state_size != state_size or state.size() != state_size:  # a new model version keeps the state
		state_size = policy.state_size
		state = policy.zero_state()
	_loaded_file = packed
	models_loaded += 1
	weights_seq_no = int(set_state.get("weights_seq_no", weights_seq_no))
	return null
