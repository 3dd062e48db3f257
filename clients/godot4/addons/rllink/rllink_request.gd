# One request sent to the gateway and what became of it. Requests that get a reply
# (PING, GET_CONFIG, GET_STATE, EPISODES_AND_GET_STATE, START_EPISODE, GET_ACTION) are
# done when the reply, an ERROR, or a broken connection arrives; check `error` first.
# In a coroutine: `await request.completed` (when `done` is still false).
extends RefCounted

signal completed(request)

var type := ""
var message := {}
var expected_reply := ""  # "" for requests that get no reply (EPISODES, LOG_*, END_EPISODE)
var internal := false  # the client's own (handshake, ordering markers): never shown to the game
var sent_msec := 0

var done := false
var reply = null  # the reply's Dictionary when it came
# When refused or lost: {"code", "message", "details", "request"}; codes are the
# gateway's (unauthorized, too_many_episodes, ...) or the client's own
# (connection_closed, timeout, bad_frame, unexpected_reply).
var error = null


func _init(request_message: Dictionary, expected := "") -> void:
	message = request_message
	type = str(request_message.get("type", ""))
	expected_reply = expected


func expects_reply() -> bool:
	return expected_reply != ""


func succeeded() -> bool:
	return done and error == null


func finish(reply_message: Dictionary) -> void:
	if done:
		return
	reply = reply_message
	done = true
	completed.emit(self)


func fail(error_info: Dictionary) -> void:
	if done:
		return
	error = error_info
	done = true
	completed.emit(self)
