# Thin mode: the gateway runs the policy. One agent's episodes as the gateway's
# thin-client requests (RLLINK.md "Server-side inference"):
#
#   first step of an episode   START_EPISODE {episode_id}    (our own id, so it needs no
#                                                              round trip of its own)
#   every step                 LOG_RETURNS {reward}           (for the previous action)
#                              GET_ACTION {obs, action_mask?} -> ACTION (one round trip)
#   end                        END_EPISODE {obs, is_terminated, is_truncated}
#
# All of a step's messages go out in one write. Recovers by itself from what a running
# game should survive: a dropped connection (the client reconnects; the gateway ended
# the open episode as truncated, so a new one starts from the current observation) and
# an episode the gateway no longer knows (episode_timeout_s): a new one starts too.
# Any other error ends the step with {"error": ...} for the game to handle.
# An episode the gateway plays as an evaluation one (its evaluation_interval: the mode,
# never trained on) is marked so in EPISODE_STARTED: `evaluating` from its first action.
# A thin client gets no SET_STATE unasked: when the gateway sets environment parameters,
# an episode's end asks for one (GET_STATE) once the policy version has changed, so that
# get_env_param follows the curriculum's lessons from the next episode on.
extends "res://addons/rllink/rllink_session.gd"

var _episode_id := ""  # the open gateway episode ("" none)
var _episode_connection := -1  # client.connection_number it was started on
var _acted := false  # it has an action a reward can belong to
var _pending_reward := 0.0  # reward for the last action, not sent yet
var _obs = null  # the observation of the step under way
var _mask: Array = []  # its action mask (empty: all allowed)
var _start = null  # START_EPISODE request of the step, if any
var _action = null  # GET_ACTION request of the step
var _retries := 0
var _retry_when_ready := false
var _lost = null  # the error that made the step retry
var _recent_episodes: Array = []  # this session's latest episode ids (to pick out their errors)
var _params_version := 0  # the version whose env_params the client holds


func _init(rllink_client) -> void:
	client = rllink_client


func mode() -> String:
	return "thin"


func action_space() -> Dictionary:
	return client.module_for(agent_id, module_id).get("action_space", {})


func episode_id() -> String:
	return _episode_id


# Start the step for this observation (its action comes from poll_step / wait_step).
# mask: the actions allowed, one 0/1 per logit (empty: all allowed); the gateway
# answers an allowed action and trains with the mask.
func begin_step(obs, mask := []) -> void:
	_obs = obs
	_mask = mask
	_retries = 0
	_send_step()


func _send_step() -> void:
	_retry_when_ready = false
	if _episode_id != "" and _episode_connection != client.connection_number:
		_episode_id = ""  # it lived on a connection that is gone: the gateway ended it
	_start = null
	if _episode_id == "":
		_episode_id = client.new_episode_id()
		_episode_connection = client.connection_number
		_recent_episodes.append(_episode_id)
		if _recent_episodes.size() > 4:
			_recent_episodes.pop_front()
		_start = client.start_episode(_episode_id, agent_id, module_id, training_enabled)
		_acted = false
		_pending_reward = 0.0
	elif _acted and _pending_reward != 0.0:
		client.log_returns(_episode_id, _pending_reward)
	_pending_reward = 0.0
	_action = client.get_action(_episode_id, _obs, explore, _mask)
	client.flush()


func poll_step():
	client.poll()
	if _retry_when_ready:
		return _poll_retry()
	if _action == null:
		return {"error": error_info("no_step", "poll_step() before begin_step()")}
	if not _action.done:
		return null
	var error = _step_error()
	if error != null:
		if _recoverable(error) and _retries < max_retries:
			_retries += 1
			_lost = error
			if error.code == RLlinkClient.CONNECTION_CLOSED or error.code == RLlinkClient.TIMEOUT:
				reconnects += 1
			_episode_id = ""
			_retry_when_ready = true
			return poll_step()
		_action = null
		return {"error": error}
	var reply = _action.reply
	_action = null
	if _start != null and _start.reply != null:  # the episode's first action: EPISODE_STARTED
		var marked = _start.reply.get("evaluation", false)
		evaluating = typeof(marked) == TYPE_BOOL and marked
	_acted = true
	env_steps += 1
	weights_seq_no = int(reply.get("weights_seq_no", weights_seq_no))
	return {"action": reply.get("action"), "weights_seq_no": weights_seq_no}


# Waiting for the connection to come back before sending the step again.
func _poll_retry():
	if client.is_ready():
		_send_step()
		return null
	if client.is_failed():
		return {"error": client.last_error}
	if client.state_name() == "idle":  # auto_reconnect is off
		return {"error": _lost}
	return null


# What went wrong with the step's requests (null: nothing).
func _step_error():
	if _start != null and _start.error != null:
		return _start.error  # the cause; GET_ACTION then failed for its unknown episode
	if _action.error != null:
		return _action.error
	return _refused_send()


# Reward for the last action (added up; sent with the next step or the episode's end).
func add_reward(reward: float) -> void:
	_pending_reward += reward


# The episode is over: its final observation and how it ended.
func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	var open: bool = _episode_id != "" and _episode_connection == client.connection_number
	if open and client.is_ready() and _acted:
		if _pending_reward != 0.0:
			client.log_returns(_episode_id, _pending_reward)
		client.end_episode(_episode_id, final_obs, terminated, truncated)
		if not client.env_params.is_empty() and weights_seq_no > _params_version:
			_params_version = weights_seq_no
			client.get_state()  # its SET_STATE brings the latest env_params (read as it is dispatched)
		client.flush()
	# On a lost connection there is nothing to end: the gateway ended it at the disconnect.
	_episode_id = ""
	_acted = false
	_pending_reward = 0.0


# Errors of this session's LOG_RETURNS / END_EPISODE: one about an episode that is not
# open any more (it timed out) is harmless; anything else is the game's to see.
func _refused_send():
	for error in client.take_send_errors(_recent_episodes):
		if error.code != "unknown_episode":
			return error
	return null


func _recoverable(error: Dictionary) -> bool:
	return error.code in [RLlinkClient.CONNECTION_CLOSED, RLlinkClient.TIMEOUT, "unknown_episode"]
