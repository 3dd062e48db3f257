# An RLlink client: one connection to a gateway over TCP (optionally TLS) or WebSocket,
# the handshake (PING with the token, GET_CONFIG with the spaces the game declares),
# RLlib's requests and the gateway's thin-client requests, ERROR frames handed to the
# game, and reconnection.
#
# Non-blocking at its core, so it works in web exports too: requests are queued and
# written at the next poll() or flush(); replies complete their Request objects
# (rllink_request.gd) as poll() reads them. On desktop a game may also block:
# wait(request) polls until the request is done (every wait is bounded). In a coroutine,
# `await request.completed` while a node calls poll() every frame.
#
#   var client = preload("res://addons/rllink/rllink_client.gd").new()
#   client.host = "127.0.0.1"; client.port = 5555; client.token = "..."
#   var request = client.wait(client.get_action(episode_id, obs))
#   if request.error: print(request.error.code, ": ", request.error.message)
#   else: act(request.reply.action)
#
# Errors: an ERROR frame fails the request it answers, with the gateway's code and
# message; an ERROR refusing a message that gets no reply (LOG_RETURNS, END_EPISODE,
# EPISODES, LOG_ACTION) is kept for take_send_errors(). Every error is also emitted as
# the `error` signal. After a dropped connection the client reconnects by itself
# (auto_reconnect): requests in flight fail with connection_closed, and thin episodes,
# which belong to one connection, are gone (connection_number changes).
extends RefCounted

signal connected(config)  # handshake done; config is SET_CONFIG (also in .config)
signal disconnected(reason)  # the connection broke or was refused; reason: an error Dictionary
signal error(info)  # every ERROR frame and connection failure: {code, message, details, request}
signal note(text)  # connects, reconnects and retries, for the game's log

enum { IDLE, CONNECTING, HANDSHAKE, READY, FAILED }

const Framing = preload("res://addons/rllink/rllink_framing.gd")
const Request = preload("res://addons/rllink/rllink_request.gd")
const TcpTransport = preload("res://addons/rllink/rllink_tcp_transport.gd")
const WsTransport = preload("res://addons/rllink/rllink_ws_transport.gd")

# The client's own error codes (the gateway's are listed in its README, "Errors").
const CONNECTION_CLOSED = "connection_closed"  # the connection broke or could not be opened
const TIMEOUT = "timeout"  # no reply within reply_timeout_s
const BAD_FRAME = "bad_frame"  # the gateway sent something that is not a frame
const UNEXPECTED_REPLY = "unexpected_reply"
const TLS_ERROR = "tls_error"  # the certificate is not trusted or not for this name
const OWN_CODES = [CONNECTION_CLOSED, TIMEOUT, BAD_FRAME, UNEXPECTED_REPLY, TLS_ERROR]

# Handshake failures worth another attempt (a full gateway, a network hiccup).
const RETRY_CODES = [CONNECTION_CLOSED, TIMEOUT, "too_many_connections", "idle_timeout"]

const REPLY_TYPES = {
	"PING": "PONG",
	"GET_CONFIG": "SET_CONFIG",
	"GET_STATE": "SET_STATE",
	"EPISODES_AND_GET_STATE": "SET_STATE",
	"START_EPISODE": "EPISODE_STARTED",
	"GET_ACTION": "ACTION",
}

const POLL_SLEEP_USEC = 100  # between polls of a blocking wait: a localhost round trip is ~300 us

# -- Settings (set before the first request) ----------------------------------------------

var host := "127.0.0.1"
var port := 5555  # the gateway's tcp_port (TCP) or http_port (WebSocket)
var token := ""  # the gateway's auth_token, sent in the first PING
var transport := "tcp"  # "tcp" or "ws" (web exports: always "ws")
var ws_path := "/rllink"
var use_tls := false
var tls_certificate_path := ""  # a PEM certificate to trust (self-signed); empty: the system's CAs
var tls_hostname := ""  # the name the gateway's certificate carries (empty: host)
var auto_reconnect := true
var reconnect_timeout_s := 30.0  # keep trying to (re)connect this long, then give up
var connect_timeout_s := 10.0  # one attempt
var reply_timeout_s := 120.0  # longest wait for a reply (EPISODES_AND_GET_STATE waits for training)
var close_timeout_s := 2.0  # close(): longest wait for the gateway to answer what is in flight

# -- State ---------------------------------------------------------------------------------

var config := {}  # SET_CONFIG of the current connection
var env_params := {}  # the gateway's env_params: SET_CONFIG's, then the latest SET_STATE's
var connection_number := 0  # successful handshakes so far
var last_error = null  # why the client gave up (state "failed")

var _state := IDLE
var _transport = null
var _decoder = Framing.new()
var _inflight: Array = []  # requests written, in order, whose fate is not known yet
var _outbox: Array = []  # requests made before the connection was ready
var _write_buffer := PackedByteArray()
var _marker_needed := false  # a no-reply request was written since the last one with a reply
var _send_errors: Array = []
var _handshake: Array = []  # [PING, GET_CONFIG] of the connection being opened
var _declared := {}  # module_id ("" the default module) -> {observation_space?, action_space?}
var _attempt := 0
var _attempt_started := 0
var _retry_at := -1
var _retry_delay_ms := 0
var _give_up_at := 0
var _ever_connected := false
var _episode_counter := 0
var _id_prefix := ""


func _init() -> void:
	var rng := RandomNumberGenerator.new()
	rng.randomize()
	_id_prefix = "gd4%08x" % (rng.randi() & 0x7fffffff)


# -- Connection -------------------------------------------------------------------------------


func state_name() -> String:
	return ["idle", "connecting", "handshake", "ready", "failed"][_state]


func is_ready() -> bool:
	return _state == READY


func is_failed() -> bool:
	return _state == FAILED


# The spaces the game declares for a module (RLLINK.md "Spaces the game declares"),
# sent in every GET_CONFIG: module_id "" is the gateway's default module. Empty
# dictionaries declare nothing. Call it before connecting.
func declare_spaces(
	module_id: String, observation_space: Dictionary, action_space: Dictionary
) -> void:
	var spaces := {}
	if not observation_space.is_empty():
		spaces["observation_space"] = observation_space
	if not action_space.is_empty():
		spaces["action_space"] = action_space
	if not spaces.is_empty():
		_declared[module_id] = spaces


# GET_CONFIG with the declared spaces: the default module's as top-level fields, the
# others under policies.
func _get_config_message() -> Dictionary:
	var message := {"type": "GET_CONFIG"}
	var policies := {}
	for module_id in _declared:
		if module_id == "":
			message.merge(_declared[module_id])
		else:
			policies[module_id] = _declared[module_id]
	if not policies.is_empty():
		message["policies"] = policies
	return message


# Start connecting (requests also start it). Tries until reconnect_timeout_s while the
# gateway cannot be reached or is full; an unauthorized answer ends it at once.
func connect_to_gateway() -> void:
	if _state == CONNECTING or _state == HANDSHAKE or _state == READY:
		return
	last_error = null
	_attempt = 0
	_retry_delay_ms = 250
	_give_up_at = Time.get_ticks_msec() + int(reconnect_timeout_s * 1000)
	_start_attempt()


# Poll until the handshake is done; false if the client gave up (see last_error).
func wait_ready(timeout_s := -1.0) -> bool:
	connect_to_gateway()
	var limit: float = (
		timeout_s if timeout_s >= 0 else reconnect_timeout_s + connect_timeout_s + 5.0
	)
	var deadline := Time.get_ticks_msec() + int(limit * 1000)
	while _state != READY and _state != FAILED and Time.get_ticks_msec() < deadline:
		poll()
		if _state != READY:
			OS.delay_usec(POLL_SLEEP_USEC)
	return _state == READY


# Write what is queued and close. Open thin episodes end as truncated at the gateway.
# graceful (desktop): first wait (at most close_timeout_s) until the gateway has read
# everything and answered what is in flight: closing a socket with unread replies in it
# sends a reset, which can make the gateway drop the last messages (an END_EPISODE).
func close(graceful := true) -> void:
	if graceful and _state == READY and not OS.has_feature("web"):
		var marker = Request.new({"type": "PING"}, "PONG")
		marker.internal = true
		_write(marker)
		var deadline := Time.get_ticks_msec() + int(close_timeout_s * 1000)
		while _state == READY and not marker.done and Time.get_ticks_msec() < deadline:
			poll()
			if not marker.done:
				OS.delay_usec(POLL_SLEEP_USEC)
	flush()
	if _transport != null:
		_transport.close()
	_transport = null
	_fail_all(_error(CONNECTION_CLOSED, "the client was closed"))
	_state = IDLE


func _start_attempt() -> void:
	_attempt += 1
	_decoder.clear()
	_write_buffer = PackedByteArray()
	_marker_needed = false
	if transport == "ws" or OS.has_feature("web"):
		_transport = WsTransport.new()
		_transport.open(host, port, use_tls, tls_certificate_path, ws_path)
	else:
		_transport = TcpTransport.new()
		_transport.open(host, port, use_tls, tls_certificate_path, tls_hostname)
	_attempt_started = Time.get_ticks_msec()
	_retry_at = -1
	_state = CONNECTING


func _address() -> String:
	return "%s:%d" % [host, port]


func _begin_handshake() -> void:
	_state = HANDSHAKE
	var ping := {"type": "PING"}
	if token != "":
		ping["token"] = token  # the gateway's auth: the first message must carry it
	_handshake = [Request.new(ping, "PONG"), Request.new(_get_config_message(), "SET_CONFIG")]
	for req in _handshake:
		req.internal = true
		_append(req)
	flush()


func _check_handshake() -> void:
	for req in _handshake:
		if req.error != null:
			_handshake = []
			if req.error.code in RETRY_CODES:
				_attempt_failed(req.error)
			else:
				_give_up(req.error)
			return
	if not _handshake[1].done:
		return
	config = _handshake[1].reply
	_handshake = []
	_state = READY
	connection_number += 1
	var verb: String = "reconnected to " if _ever_connected else "connected to "
	var attempts: String = " (attempt %d)" % _attempt if _attempt > 1 else ""
	note.emit(verb + _address() + attempts)
	_ever_connected = true
	var waiting := _outbox
	_outbox = []
	for req in waiting:
		_write(req)
	flush()
	connected.emit(config)


func _attempt_failed(info: Dictionary) -> void:
	if _transport != null:
		_transport.close()
	_transport = null
	_fail_inflight(info)
	var now := Time.get_ticks_msec()
	if now + _retry_delay_ms > _give_up_at:
		var text := (
			"cannot connect to %s after %d attempts in %s s: %s"
			% [_address(), _attempt, str(reconnect_timeout_s), info.message]
		)
		_give_up(_error(info.code, text, info.get("details"), str(info.get("request", ""))))
		return
	note.emit(
		"cannot connect to %s (%s); retrying in %d ms" % [_address(), info.message, _retry_delay_ms]
	)
	_retry_at = now + _retry_delay_ms
	_retry_delay_ms = mini(_retry_delay_ms * 2, 5000)
	_state = CONNECTING


func _give_up(info: Dictionary) -> void:
	if _transport != null:
		_transport.close()
	_transport = null
	_state = FAILED
	last_error = info
	_fail_all(info)
	error.emit(info)


# The connection broke after the handshake: fail what is in flight, then reconnect.
func _on_broken(info: Dictionary) -> void:
	if _state == CONNECTING or _state == HANDSHAKE:
		_attempt_failed(info)
		return
	if _transport != null:
		_transport.close()
	_transport = null
	_state = IDLE
	_fail_inflight(info)
	note.emit("the connection to %s broke: %s" % [_address(), info.message])
	disconnected.emit(info)
	error.emit(info)
	if auto_reconnect:
		connect_to_gateway()


func _fail_inflight(info: Dictionary) -> void:
	var lost := _inflight
	_inflight = []
	_write_buffer = PackedByteArray()
	for req in lost:
		if req.expects_reply():  # a no-reply request's fate is unknown; nothing waits for it
			req.fail(_for_request(info, req))


func _fail_all(info: Dictionary) -> void:
	_fail_inflight(info)
	var waiting := _outbox
	_outbox = []
	for req in waiting:
		req.fail(_for_request(info, req))


static func _error(code: String, text: String, details = null, request_type := "") -> Dictionary:
	return {"code": code, "message": text, "details": details, "request": request_type}


static func _for_request(info: Dictionary, req) -> Dictionary:
	var copy := info.duplicate()
	if str(copy.get("request", "")) == "":
		copy["request"] = req.type
	return copy


# -- Polling ------------------------------------------------------------------------------------


# Move everything on: connect, write what is queued, read replies, detect a broken
# connection or a reply that is overdue. Call it every frame (the agent node does).
func poll() -> void:
	if _state == IDLE or _state == FAILED:
		return
	var now := Time.get_ticks_msec()
	if _state == CONNECTING and not _poll_connecting(now):
		return
	flush()
	if _transport == null:
		return
	_read()
	if _state == HANDSHAKE and not _handshake.is_empty():
		_check_handshake()
	if _transport != null and _transport.state == "closed":
		_on_broken(_error(CONNECTION_CLOSED, _transport.error_text))
		return
	for req in _inflight:
		if req.expects_reply():
			if now - req.sent_msec > reply_timeout_s * 1000:
				var text := "no reply to %s within %.0f s" % [req.type, reply_timeout_s]
				_on_broken(_error(TIMEOUT, text, null, req.type))
			break


# The connection attempt moved on; true once it is open (the handshake has started).
func _poll_connecting(now: int) -> bool:
	if _transport == null:
		if _retry_at >= 0 and now >= _retry_at:
			_start_attempt()
		return false
	_transport.poll()
	if _transport.state == "open":
		_begin_handshake()
		return true
	if _transport.state == "closed":
		var failure := _error(_transport.error_code, _transport.error_text)
		if failure.code in RETRY_CODES:
			_attempt_failed(failure)
		else:
			_give_up(failure)  # a certificate problem: trying again changes nothing
	elif now - _attempt_started > connect_timeout_s * 1000:
		_attempt_failed(_error(TIMEOUT, "no answer within %.0f s" % connect_timeout_s))
	return false


# Poll until the request is done (at most timeout_s; by default reply_timeout_s plus the
# time to reconnect). Desktop only: a browser cannot block.
func wait(req, timeout_s := -1.0):
	var limit: float = (
		timeout_s if timeout_s >= 0 else reply_timeout_s + reconnect_timeout_s + connect_timeout_s
	)
	var deadline := Time.get_ticks_msec() + int(limit * 1000)
	while not req.done:
		poll()
		if req.done:
			break
		if Time.get_ticks_msec() > deadline:
			var text := "no reply to %s within %.0f s" % [req.type, limit]
			req.fail(_error(TIMEOUT, text, null, req.type))
			break
		OS.delay_usec(POLL_SLEEP_USEC)
	return req


# Write what is queued now.
func flush() -> void:
	if _write_buffer.size() == 0 or _transport == null:
		return
	var bytes := _write_buffer
	_write_buffer = PackedByteArray()
	if not _transport.send(bytes):
		var text: String = _transport.error_text if _transport != null else "not connected"
		_on_broken(_error(CONNECTION_CLOSED, text))


func _read() -> void:
	_decoder.feed(_transport.receive())
	while _transport != null:
		var message = _decoder.next_message()
		if message == null:
			break
		_dispatch(message)
	if _decoder.error_message != "" and _transport != null:
		_on_broken(_error(BAD_FRAME, _decoder.error_message))


# Replies come in the order of the requests. An ERROR answers the oldest request with a
# reply, unless requests without a reply are before it: then it refuses one of those
# (a PING written between them and the next request tells the two apart).
func _dispatch(message: Dictionary) -> void:
	var type := str(message.get("type", ""))
	if type == "ERROR":
		_dispatch_error(message)
		return
	if type in ["SET_CONFIG", "SET_STATE"] and typeof(message.get("env_params")) == TYPE_DICTIONARY:
		env_params = message.env_params
	while not _inflight.is_empty() and not _inflight[0].expects_reply():
		_inflight.pop_front()  # answered in turn without an ERROR: accepted
	if _inflight.is_empty():
		note.emit("ignored a %s no request was waiting for" % type)
		return
	var req = _inflight.pop_front()
	if type == req.expected_reply:
		req.finish(message)
	else:
		var info := _error(
			UNEXPECTED_REPLY, "%s was answered by %s" % [req.type, type], null, req.type
		)
		req.fail(info)
		error.emit(info)


func _dispatch_error(message: Dictionary) -> void:
	var info := _error(
		str(message.get("code", "error")), str(message.get("message", "")), message.get("details")
	)
	if _inflight.is_empty():
		error.emit(info)
		return
	var head = _inflight[0]
	if head.expects_reply():
		_inflight.pop_front()
		info["request"] = head.type
		head.fail(info)
		if not head.internal:
			error.emit(info)
		return
	var types := PackedStringArray()
	var episode_ids: Array = []
	for req in _inflight:
		if req.expects_reply():
			break
		if not req.type in types:
			types.append(req.type)
		if req.message.has("episode_id"):
			episode_ids.append(str(req.message.episode_id))
	info["request"] = ",".join(types)
	info["episode_ids"] = episode_ids
	_send_errors.append(info)
	error.emit(info)


# -- Requests ----------------------------------------------------------------------------------


# Queue a message; it is written at the next poll() or flush() (or once connected).
# Returns its Request: messages that get a reply are done when it comes.
func request(message: Dictionary):
	var req = Request.new(message, REPLY_TYPES.get(str(message.get("type", "")), ""))
	if _state == FAILED:
		req.fail(_for_request(last_error, req))
		return req
	if _state == READY:
		_write(req)
	else:
		_outbox.append(req)
		if _state == IDLE:
			connect_to_gateway()
	return req


# Errors of messages that get no reply (LOG_ACTION, LOG_RETURNS, END_EPISODE, EPISODES),
# since the last call: [{code, message, details, request, episode_ids}]. episode_ids:
# only the errors about these episodes (and those about none), when several agents
# share the client.
func take_send_errors(episode_ids := []) -> Array:
	if episode_ids.is_empty():
		var all := _send_errors
		_send_errors = []
		return all
	var taken: Array = []
	var kept: Array = []
	for info in _send_errors:
		var mine: bool = info.episode_ids.is_empty()
		for id in info.episode_ids:
			if id in episode_ids:
				mine = true
		if mine:
			taken.append(info)
		else:
			kept.append(info)
	_send_errors = kept
	return taken


func _write(req) -> void:
	if req.expects_reply() and _marker_needed:
		var marker = Request.new({"type": "PING"}, "PONG")
		marker.internal = true
		_append(marker)
	_append(req)


func _append(req) -> void:
	_write_buffer.append_array(Framing.encode(req.message))
	req.sent_msec = Time.get_ticks_msec()
	_inflight.append(req)
	_marker_needed = not req.expects_reply()


# A fresh episode id, unique on this client's connections.
func new_episode_id() -> String:
	_episode_counter += 1
	return "%s-%d" % [_id_prefix, _episode_counter]


# -- RLlink (RLlib's requests) -------------------------------------------------------------------


func ping():
	return request({"type": "PING"})


func get_config():
	return request(_get_config_message())


# GET_STATE -> SET_STATE: the current policy (decode it with decode_onnx).
func get_state():
	return request({"type": "GET_STATE"})


# EPISODES: episode chunks, no reply.
func episodes(chunks: Array, env_steps: int):
	return request({"type": "EPISODES", "episodes": chunks, "env_steps": env_steps})


# EPISODES_AND_GET_STATE -> SET_STATE, once the policy trained on them (force_on_policy).
func episodes_and_get_state(chunks: Array, env_steps: int):
	return request({"type": "EPISODES_AND_GET_STATE", "episodes": chunks, "env_steps": env_steps})


# -- Server-side inference (thin clients) ------------------------------------------------------


# START_EPISODE -> EPISODE_STARTED. An episode belongs to this connection only.
func start_episode(episode_id := "", agent_id := "", module_id := "", training_enabled := true):
	var message := {"type": "START_EPISODE"}
	if episode_id != "":
		message["episode_id"] = episode_id
	if agent_id != "":
		message["agent_id"] = agent_id
	if module_id != "":
		message["module_id"] = module_id
	if not training_enabled:
		message["training_enabled"] = false
	return request(message)


# GET_ACTION -> ACTION {episode_id, action, weights_seq_no}: the gateway's policy acts on
# obs. action_mask: the actions allowed now, one 0/1 per logit (a module with the
# gateway's action_masking; empty: all allowed); the gateway answers an allowed one.
func get_action(episode_id: String, obs, explore := true, action_mask := []):
	var message := {"type": "GET_ACTION", "episode_id": episode_id, "obs": obs}
	if not explore:
		message["explore"] = false
	if not action_mask.is_empty():
		message["action_mask"] = action_mask
	return request(message)


# GET_ACTION for several episodes at once: batch = [{episode_id, obs, explore?,
# action_mask?}, ...] -> ACTION {actions: [...], weights_seq_no}, in the batch's order.
func get_actions(batch: Array):
	return request({"type": "GET_ACTION", "batch": batch})


# LOG_ACTION: an action the game chose itself (a human, a script) on obs; action_mask:
# the actions it chose among (empty: all allowed). No reply.
func log_action(episode_id: String, obs, action, action_mask := []):
	var message := {"type": "LOG_ACTION", "episode_id": episode_id, "obs": obs, "action": action}
	if not action_mask.is_empty():
		message["action_mask"] = action_mask
	return request(message)


# LOG_RETURNS: reward for the episode's last action (added up if sent twice). No reply.
func log_returns(episode_id: String, reward: float):
	return request({"type": "LOG_RETURNS", "episode_id": episode_id, "reward": reward})


# END_EPISODE with the final observation. No reply.
func end_episode(episode_id: String, obs, terminated := true, truncated := false):
	return request(
		{
			"type": "END_EPISODE",
			"episode_id": episode_id,
			"obs": obs,
			"is_terminated": terminated,
			"is_truncated": truncated,
		}
	)


# -- Config and policy helpers --------------------------------------------------------------------


# The module an agent plays, from SET_CONFIG: {module_id, observation_space,
# action_space, onnx_input_name, onnx_output_names, onnx_action_mask_input_name,
# action_distribution, state_size}. module_id wins, then the first policy_mapping glob matching
# agent_id, then the default module.
func module_for(agent_id := "", module_id := "") -> Dictionary:
	var policies: Dictionary = config.get("policies", {})
	var chosen := module_id
	if chosen == "" and agent_id != "":
		var mapping: Dictionary = config.get("policy_mapping", {})
		for pattern in mapping:
			if agent_id.match(pattern):
				chosen = str(mapping[pattern])
				break
	if chosen == "":
		chosen = str(config.get("default_module_id", "default_policy"))
	var info := {}
	if policies.has(chosen):
		info = policies[chosen].duplicate()
	else:  # a gateway without the multi-policy extension: the top-level fields
		for key in [
			"observation_space",
			"action_space",
			"onnx_input_name",
			"onnx_output_names",
			"onnx_action_mask_input_name",
			"action_distribution",
			"action_noise",
			"state_size",
		]:
			if config.has(key):
				info[key] = config[key]
	info["module_id"] = chosen
	return info


# A SET_STATE's model for a module as sent (base64 of its gzip): onnx_files' entry, else
# onnx_file (the addon's sessions compare it: an unchanged model is not loaded again).
static func packed_onnx(set_state: Dictionary, module_id := "") -> String:
	var files = set_state.get("onnx_files", {})
	if module_id != "" and typeof(files) == TYPE_DICTIONARY and files.has(module_id):
		return str(files[module_id])
	return str(set_state.get("onnx_file", ""))


# The plain ONNX bytes of a SET_STATE (the module's from onnx_files, else onnx_file):
# base64, then gzip.
static func decode_onnx(set_state: Dictionary, module_id := "") -> PackedByteArray:
	var gz := Marshalls.base64_to_raw(packed_onnx(set_state, module_id))
	if gz.size() < 18:
		return PackedByteArray()
	var n := gz.size()
	# gzip keeps the uncompressed size in its last 4 bytes (little-endian).
	var size := gz.decode_u32(n - 4)
	return gz.decompress(size, FileAccess.COMPRESSION_GZIP)
