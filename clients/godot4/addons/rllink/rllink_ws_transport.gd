# The WebSocket transport (the gateway's ws(s)://host:http_port/rllink): the only one
# a web export has. Each message carries RLlink frames, header included, and the
# payloads are read as one byte stream (RLLINK.md); we send binary messages, so the
# gateway answers in binary. Godot 4's WebSocketPeer with TCP_NODELAY, so no round trip
# waits for a delayed ACK (Godot 3.2's desktop client did). Same interface as
# rllink_tcp_transport.gd.
extends RefCounted

const Tls = preload("res://addons/rllink/rllink_tls.gd")

# Room for one SET_STATE (the policy, base64) of a few MB; Godot's default is 64 KiB,
# and a message larger than the inbound buffer cannot be received at all.
const BUFFER_BYTES = 16 * 1024 * 1024

var state := "closed"
var error_text := ""
var error_code := "connection_closed"

var _ws: WebSocketPeer = null
var _url := ""
var _inbox := PackedByteArray()  # payloads read, not yet taken by receive()


# Start connecting to ws://host:port<path> (wss:// with TLS). tls_certificate_path: a
# PEM certificate to trust (desktop only; a browser trusts what the browser trusts).
func open(
	host: String, port: int, use_tls := false, tls_certificate_path := "", path := "/rllink"
) -> void:
	close()
	_inbox = PackedByteArray()
	_url = "%s://%s:%d%s" % ["wss" if use_tls else "ws", host, port, path]
	var options: TLSOptions = null
	if use_tls:
		var made := Tls.client_options(tls_certificate_path)
		if made.has("error"):
			_fail(made.error, "tls_error")
			return
		options = made.options
	_ws = WebSocketPeer.new()
	_ws.inbound_buffer_size = BUFFER_BYTES
	_ws.outbound_buffer_size = BUFFER_BYTES
	var err := _ws.connect_to_url(_url, options)
	if err != OK:
		_fail("cannot connect to %s (error %d)" % [_url, err])
		return
	state = "connecting"
	error_text = ""
	error_code = "connection_closed"


func poll() -> void:
	if _ws == null:
		return
	_ws.poll()
	_drain()  # before a close: an ERROR the gateway sent just before closing is kept
	var ready_state := _ws.get_ready_state()
	if state == "connecting":
		if ready_state == WebSocketPeer.STATE_OPEN:
			_ws.set_no_delay(true)
			state = "open"
		elif ready_state == WebSocketPeer.STATE_CLOSED:
			_fail("cannot open %s: is the gateway running, and is this its http_port?" % _url)
	elif state == "open" and ready_state != WebSocketPeer.STATE_OPEN:
		_fail("the gateway closed the WebSocket (code %d)" % _ws.get_close_code())


func send(bytes: PackedByteArray) -> bool:
	if state != "open":
		return false
	var err := _ws.send(bytes, WebSocketPeer.WRITE_MODE_BINARY)
	if err != OK:
		_fail("the WebSocket to %s broke while sending (error %d)" % [_url, err])
		return false
	_ws.poll()  # hand it to the socket now, not at the next poll
	return true


func receive() -> PackedByteArray:
	poll()
	var bytes := _inbox
	_inbox = PackedByteArray()
	return bytes


func _drain() -> void:
	if _ws == null:
		return
	while _ws.get_available_packet_count() > 0:
		_inbox.append_array(_ws.get_packet())


func close() -> void:
	if _ws != null:
		_ws.close()
	_ws = null
	state = "closed"


func _fail(text: String, code := "connection_closed") -> void:
	close()
	error_text = text
	error_code = code
