# The WebSocket transport (the gateway's ws(s)://host:http_port/rllink): the only one
# an HTML5 export has. Each message carries RLlink frames, header included, and the
# payloads are read as one byte stream (RLLINK.md); we send binary messages, so the
# gateway answers in binary. Same interface as rllink_tcp_transport.gd.
extends Reference

var state = "closed"
var error_text = ""
var error_code = "connection_closed"

var _ws: WebSocketClient = null
var _url = ""
var _inbox = PoolByteArray()  # payloads read, not yet taken by receive()


# Start connecting to ws://host:port<path> (wss:// with TLS). tls_certificate_path: a
# PEM certificate to trust (desktop only; a browser trusts what the browser trusts).
func open(host: String, port: int, use_tls := false, tls_certificate_path := "", path := "/rllink") -> void:
	close()
	_inbox = PoolByteArray()
	_url = "%s://%s:%d%s" % ["wss" if use_tls else "ws", host, port, path]
	_ws = WebSocketClient.new()
	if use_tls and tls_certificate_path != "":
		var certificate = X509Certificate.new()
		if certificate.load(tls_certificate_path) != OK:
			_fail("cannot read the TLS certificate %s" % tls_certificate_path, "tls_error")
			return
		_ws.trusted_ssl_certificate = certificate
	_ws.verify_ssl = true
	# Room for a SET_STATE (the policy, base64) of a few MB; Godot's default is 64 KiB.
	_ws.set_buffers(16384, 1024, 16384, 1024)
	var err = _ws.connect_to_url(_url)
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
	var status = _ws.get_connection_status()
	if state == "connecting":
		if status == NetworkedMultiplayerPeer.CONNECTION_CONNECTED:
			_ws.get_peer(1).set_write_mode(WebSocketPeer.WRITE_MODE_BINARY)
			state = "open"
		elif status == NetworkedMultiplayerPeer.CONNECTION_DISCONNECTED:
			_fail("cannot open %s: is the gateway running, and is this its http_port?" % _url)
	elif state == "open" and status == NetworkedMultiplayerPeer.CONNECTION_DISCONNECTED:
		_fail("the gateway closed the WebSocket")


func send(bytes: PoolByteArray) -> bool:
	if state != "open":
		return false
	var err = _ws.get_peer(1).put_packet(bytes)
	if err != OK:
		_fail("the WebSocket to %s broke while sending (error %d)" % [_url, err])
		return false
	_ws.poll()  # hand it to the socket now, not at the next poll
	return true


func receive() -> PoolByteArray:
	_drain()
	var bytes = _inbox
	_inbox = PoolByteArray()
	return bytes


func _drain() -> void:
	if _ws == null:
		return
	var peer = _ws.get_peer(1)
	while peer.get_available_packet_count() > 0:
		_inbox.append_array(peer.get_packet())


func close() -> void:
	if _ws != null:
		_ws.disconnect_from_host()
	_ws = null
	state = "closed"


func _fail(text: String, code := "connection_closed") -> void:
	close()
	error_text = text
	error_code = code
