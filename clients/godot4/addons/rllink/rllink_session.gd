# What every inference mode's session shares: the agent's settings, the counters, and
# the blocking wait for a step. A session runs one agent's episodes; the agent calls
# begin_step(obs, mask), then poll_step() (or wait_step()) until it returns
# {"action", "weights_seq_no"} or {"error"}, add_reward(r) and end_episode(...).
extends RefCounted

const RLlinkClient = preload("res://addons/rllink/rllink_client.gd")  # its error codes

var client = null  # rllink_client.gd (null: a session that needs no gateway)
var agent_id := ""
var module_id := ""
var explore := true
var training_enabled := true
var max_retries := 3  # reconnects (or restarted episodes) one step may take

var weights_seq_no := -1  # policy version of the last action
# The episode under way is an evaluation one (RLLINK.md "Evaluation episodes": played with
# the mode, never trained on), from its first action until the next episode's first one:
# thin, EPISODE_STARTED says so; local, SET_CONFIG's evaluation_interval. Never in
# model_file and heuristic play.
var evaluating := false
var env_steps := 0
var reconnects := 0


# "thin", "local", "model_file" or "heuristic".
func mode() -> String:
	return ""


# Whether the agent must wait for the gateway's handshake before a step.
func needs_gateway() -> bool:
	return true


# The action space the actions belong to (to turn JSON numbers into the game's ints).
func action_space() -> Dictionary:
	return {}


func begin_step(_obs, _mask := []) -> void:
	pass


# null while the action is on its way; then {"action", "weights_seq_no"} or {"error"}.
func poll_step():
	return {"error": error_info("no_step", "this session cannot act")}


func add_reward(_reward: float) -> void:
	pass


func end_episode(_final_obs, _terminated: bool, _truncated: bool) -> void:
	pass


# Poll until the step is done (desktop; bounded by the client's timeouts).
func wait_step():
	var limit_s := 0.0
	if client != null:
		limit_s = client.reply_timeout_s + client.reconnect_timeout_s + client.connect_timeout_s
	var deadline := Time.get_ticks_msec() + int(limit_s * 1000 * (max_retries + 1))
	while true:
		var result = poll_step()
		if result != null:
			return result
		if Time.get_ticks_msec() > deadline:
			var text := "no action within the client's timeouts"
			return {"error": error_info(RLlinkClient.TIMEOUT, text, "GET_ACTION")}
		OS.delay_usec(100)


static func error_info(code: String, text: String, request := "", details = null) -> Dictionary:
	return {"code": code, "message": text, "details": details, "request": request}
