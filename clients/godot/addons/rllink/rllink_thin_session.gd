# Thin mode: the gateway runs the policy. One agent's episodes as the gateway's
# thin-client requests (README "Server-side inference"):
#
#   first step of an episode   START_EPISODE {episode_id}    (our own id, so it needs no
#                                                              round trip of its own)
#   every step                 LOG_RETURNS {reward}           (for the previous action)
#                              GET_ACTION {obs, action_mask?} -> ACTION  (one round trip per step)
#   end                        END_EPISODE {obs, is_terminated, is_truncated}
#
# All of a step's messages go out in one write. Recovers by itself from what a running
# game should survive: a dropped connection (the client reconnects; the gateway ended
# the open episode as truncated, so a new one starts from the current observation) and
# an episode the gateway no longer knows (episode_timeout_s): a new one starts too.
# Any other error ends the step with {"error": ...} for the game to handle.
#
# Evaluation episodes: the gateway plays every evaluation_interval-th episode with the mode
# and says so in EPISODE_STARTED (evaluation: true); is_evaluation_episode() passes it on.
extends Reference

var client                      # rllink_client.gd
var agent_id = ""
var module_id = ""
var explore = true
var training_enabled = true
var max_retries = 3             # reconnects (or restarted episodes) one step may take

var weights_seq_no = -1         # policy version of the last action
var env_steps = 0
var reconnects = 0

var _episode_id = ""            # the open gateway episode ("" none)
var _episode_connection = -1    # client.connection_number it was started on
var _acted = false              # it has an action a reward can belong to
var _evaluating = false         # the latest episode is an evaluation one (its EPISODE_STARTED)
var _pending_reward = 0.0       # reward for the last action, not sent yet
var _obs = null                 # the observation of the step under way
var _mask = []                  # its action mask (empty: all allowed)
var _start = null               # START_EPISODE request of the step, if any
var _action = null              # GET_ACTION request of the step
var _retries = 0
var _retry_when_ready = false
var _lost = null                # the error that made the step retry
var _recent_episodes = []       # ids of this session's latest episodes (to pick out their errors)


func _init(rllink_client) -> void:
	client = rllink_client


func mode() -> String:
	return "thin"


func episode_id() -> String:
	return _episode_id


func is_evaluation_episode() -> bool:
	return _evaluating


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


# null while the action is on its way; then {"action", "weights_seq_no"} or {"error"}.
func poll_step():
	client.poll()
	if _retry_when_ready:
		if client.is_ready():
			_send_step()
		elif client.is_failed():
			return {"error": client.last_error}
		elif client.state_name() == "idle":  # auto_reconnect is off
			return {"error": _lost}
		return null
	if _action == null:
		return {"error": {"code": "no_step", "message": "poll_step() before begin_step()", "details": null, "request": ""}}
	if not _action.done:
		return null
	var error = null
	if _start != null and _start.error != null:
		error = _start.error  # the cause; GET_ACTION then failed for its unknown episode
	elif _action.error != null:
		error = _action.error
	if error == null:
		error = _refused_send()
	if error != null:
		if _recoverable(error) and _retries < max_retries:
			_retries += 1
			_lost = error
			if error.code == client.CONNECTION_CLOSED or error.code == client.TIMEOUT:
				reconnects += 1
			_episode_id = ""
			_retry_when_ready = true
			return poll_step()
		_action = null
		return {"error": error}
	if _start != null and _start.reply != null:  # answered before the action: replies come in order
		_evaluating = _start.reply.get("evaluation", false) == true
	var reply = _action.reply
	_action = null
	_acted = true
	env_steps += 1
	weights_seq_no = int(reply.get("weights_seq_no", weights_seq_no))
	return {"action": reply.get("action"), "weights_seq_no": weights_seq_no}


# Poll until the step is done (desktop; bounded by the client's timeouts).
func wait_step():
	var deadline = OS.get_ticks_msec() + int((client.reply_timeout_s + client.reconnect_timeout_s + client.connect_timeout_s) * 1000 * (max_retries + 1))
	while true:
		var result = poll_step()
		if result != null:
			return result
		if OS.get_ticks_msec() > deadline:
			return {"error": {"code": client.TIMEOUT, "message": "no action within the client's timeouts", "details": null, "request": "GET_ACTION"}}
		OS.delay_usec(client.POLL_SLEEP_USEC)


# Reward for the last action (added up; sent with the next step or the episode's end).
func add_reward(reward: float) -> void:
	_pending_reward += reward


# The episode is over: its final observation and how it ended.
func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	if _episode_id != "" and _episode_connection == client.connection_number and client.is_ready() and _acted:
		if _pending_reward != 0.0:
			client.log_returns(_episode_id, _pending_reward)
		client.end_episode(_episode_id, final_obs, terminated, truncated)
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
	return error.code in [client.CONNECTION_CLOSED, client.TIMEOUT, "unknown_episode"]
