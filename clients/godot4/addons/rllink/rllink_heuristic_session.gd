# heuristic mode: the game's own get_heuristic_action() plays (a human at the controls,
# a scripted bot). When a gateway is connected, every decision is logged as the
# gateway's thin-client messages, so the gateway trains on the demonstrations:
#
#   START_EPISODE {episode_id}, then per step LOG_RETURNS {reward} (the last action's)
#   and LOG_ACTION {obs, action, action_mask?}, and END_EPISODE at the end.
#
# Nothing waits for the gateway: while it is unreachable the game plays on and the
# decisions are not logged (a new episode starts once it is back). A refusal (a wrong
# token, a bad observation) ends the step with {"error"} as in thin mode.
#
# With a recorder (rllink_demo_recorder.gd: the agent's record_demos_path), every episode
# is also written to the demonstrations file, gateway or not. When the gateway sets
# env_params, each episode's end asks for a SET_STATE (GET_STATE), so that get_env_param
# follows a curriculum's lessons from the next episode on.
extends "res://addons/rllink/rllink_session.gd"

var heuristic: Callable  # the game's get_heuristic_action()
var recorder = null  # rllink_demo_recorder.gd, or null: record nothing

var _episode_id := ""  # the logged gateway episode ("" none)
var _episode_connection := -1
var _start = null  # its START_EPISODE request
var _acted := false
var _pending_reward := 0.0
var _action = null
var _recent_episodes: Array = []


# rllink_client: null to play without logging.
func _init(rllink_client, heuristic_action: Callable) -> void:
	client = rllink_client
	heuristic = heuristic_action


func mode() -> String:
	return "heuristic"


func needs_gateway() -> bool:
	return false


func begin_step(obs, mask := []) -> void:
	_action = heuristic.call()
	if recorder != null:
		recorder.step(obs, _action, mask)
	if not _logging():
		return
	if _episode_id != "" and _episode_connection != client.connection_number:
		_episode_id = ""  # it lived on a connection that is gone
	if _episode_id == "":
		_episode_id = client.new_episode_id()
		_episode_connection = client.connection_number
		_recent_episodes.append(_episode_id)
		if _recent_episodes.size() > 4:
			_recent_episodes.pop_front()
		_start = client.start_episode(_episode_id, agent_id, module_id, training_enabled)
		_acted = false
	elif _acted and _pending_reward != 0.0:
		client.log_returns(_episode_id, _pending_reward)
	_pending_reward = 0.0
	client.log_action(_episode_id, obs, _action, mask)
	_acted = true
	client.flush()


func poll_step():
	if client != null:
		client.poll()
		var error = _refusal()
		if error != null:
			return {"error": error}
	env_steps += 1
	return {"action": _action, "weights_seq_no": weights_seq_no}


func add_reward(reward: float) -> void:
	_pending_reward += reward
	if recorder != null:
		recorder.add_reward(reward)


func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	if recorder != null:
		recorder.end_episode(final_obs, terminated, truncated)  # written, gateway or not
	if _logging() and _episode_id != "" and _episode_connection == client.connection_number:
		if _acted and _pending_reward != 0.0:
			client.log_returns(_episode_id, _pending_reward)
		client.end_episode(_episode_id, final_obs, terminated, truncated)
		if not client.env_params.is_empty():
			# No ACTION says the version moved: each episode asks for the latest env_params.
			client.get_state()
		client.flush()
	_episode_id = ""
	_acted = false
	_pending_reward = 0.0


# Log the decisions now? Only on a working connection (the client keeps trying in the
# background while the gateway is unreachable).
func _logging() -> bool:
	return client != null and training_enabled and client.is_ready()


# The gateway refused something we logged (null: nothing, or only lost connections and
# episodes that timed out, which the next episode gets over).
func _refusal():
	var passing: Array = [RLlinkClient.CONNECTION_CLOSED, RLlinkClient.TIMEOUT, "unknown_episode"]
	if client.is_failed() and not client.last_error.code in RLlinkClient.OWN_CODES:
		return client.last_error  # refused at the handshake (unauthorized, spaces)
	if _start != null and _start.done:
		var start_error = _start.error
		_start = null
		if start_error != null and not start_error.code in passing:
			return start_error
	for error in client.take_send_errors(_recent_episodes):
		if not error.code in passing:
			return error
	return null
