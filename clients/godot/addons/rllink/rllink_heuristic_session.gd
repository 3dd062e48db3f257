# heuristic mode: the game's own get_heuristic_action() plays (a human at the controls,
# a scripted bot). When a gateway is connected, every decision is logged as the
# gateway's thin-client messages, so the gateway trains on the demonstrations:
#
#   START_EPISODE {episode_id}, then per step LOG_RETURNS {reward} (the last action's)
#   and LOG_ACTION {obs, action, action_mask?}, and END_EPISODE at the end.
#
# Nothing waits for the gateway: while it is unreachable the game plays on and the
# decisions are not logged. A refusal (a wrong token, a bad observation) ends the step
# with {"error"} as in thin mode. With a recorder (rllink_demo_recorder.gd: the agent's
# record_demos_path), every episode is also written to the demonstrations file, gateway
# or not. The Godot 4 kit's rllink_heuristic_session.gd in GDScript 1.0.
extends Reference

var client = null               # rllink_client.gd, or null: play without logging
var heuristic                   # FuncRef: the game's get_heuristic_action()
var recorder = null             # rllink_demo_recorder.gd, or null: record nothing
var agent_id = ""
var module_id = ""
var explore = true              # unused: the game chooses
var training_enabled = true     # false: nothing is logged

var weights_seq_no = -1
var env_steps = 0
var reconnects = 0

var _episode_id = ""            # the logged gateway episode ("" none)
var _episode_connection = -1
var _start = null               # its START_EPISODE request
var _acted = false
var _pending_reward = 0.0
var _action = null
var _recent_episodes = []


func _init(rllink_client, heuristic_action: FuncRef) -> void:
	client = rllink_client
	heuristic = heuristic_action


func mode() -> String:
	return "heuristic"


func is_evaluation_episode() -> bool:
	return false  # the game's own play is never one


func begin_step(obs, mask := []) -> void:
	_action = heuristic.call_func()
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


# The game's action at once, or {"error"} when the gateway refused what was logged.
func poll_step():
	if client != null:
		client.poll()
		var error = _refusal()
		if error != null:
			return {"error": error}
	env_steps += 1
	return {"action": _action, "weights_seq_no": weights_seq_no}


func wait_step():
	return poll_step()


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
		client.flush()
	_episode_id = ""
	_acted = false
	_pending_reward = 0.0


# Log the decisions now? Only on a working connection.
func _logging() -> bool:
	return client != null and training_enabled and client.is_ready()


# The gateway refused something we logged (null: nothing, or only lost connections and
# episodes that timed out, which the next episode gets over).
func _refusal():
	var passing = [client.CONNECTION_CLOSED, client.TIMEOUT, "unknown_episode"]
	if client.is_failed() and not client.last_error.code in passing:
		return client.last_error  # refused at the handshake (unauthorized)
	if _start != null and _start.done:
		var start_error = _start.error
		_start = null
		if start_error != null and not start_error.code in passing:
			return start_error
	for error in client.take_send_errors(_recent_episodes):
		if not error.code in passing:
			return error
	return null
