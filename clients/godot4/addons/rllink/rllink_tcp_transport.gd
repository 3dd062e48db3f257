# The raw TCP transport (the gateway's TCP bridge, its tcp_port), optionally TLS
# (StreamPeerTLS over the StreamPeerTCP, TLSOptions.client with a pinned certificate).
# Non-blocking: open() starts connecting, poll() moves it on; state is "connecting",
# "open" or "closed" (then error_text says why). Godot 4's StreamPeerTCP updates its
# status only in poll(), so poll() comes before every status check and read. Not
# available in web exports (browsers have no raw sockets): use the WebSocket transport.
extends RefCounted

const Tls = preload("res://addons/rllink/rllink_tls.gd")

# The TLS states poll() may be called in (polling a closed or failed peer prints errors).
const TLS_LIVE = [StreamPeerTLS.STATUS_HANDSHAKING, StreamPeerTLS.STATUS_CONNECTED]

var state := "closed"
var error_text := ""
var error_code := "connection_closed"  # or "tls_error": a certificate problem, not worth retrying

var _tcp: StreamPeerTCP = null
var _tls: StreamPeerTLS = null
var _stream: StreamPeer = null  # what is read and written: the TCP peer, or the TLS one over it
var _use_tls := false
var _tls_hostname := ""
var _tls_options: TLSOptions = null
var _address := ""
var _port := 0


# Start connecting. tls_certificate_path: a PEM certificate to trust (empty: the
# system's CAs); tls_hostname: the name the certificate must carry (empty: host).
func open(
	host: String, port: int, use_tls := false, tls_certificate_path := "", tls_hostname := ""
) -> void:
	close()
	_address = "%s:%d" % [host, port]
	_port = port
	_use_tls = use_tls
	_tls_hostname = tls_hostname if tls_hostname != "" else host
	_tls_options = null
	if use_tls:
		var made := Tls.client_options(tls_certificate_path, tls_hostname)
		if made.has("error"):
			_fail(made.error, "tls_error")
			return
		_tls_options = made.options
	_tcp = StreamPeerTCP.new()
	var err := _tcp.connect_to_host(host, port)
	if err != OK:
		_fail("cannot start connecting (error %d): is the host name right?" % err)
		return
	state = "connecting"
	error_text = ""
	error_code = "connection_closed"


func poll() -> void:
	if _tcp != null:
		_tcp.poll()  # Godot 4: the only place the TCP status (a connect, a close) is updated
	if _tls != null and _tls.get_status() in TLS_LIVE:
		_tls.poll()  # reads a record, moves the handshake on, notices a close
	if state != "connecting":
		return
	if _tls == null:
		var status := _tcp.get_status()
		if status == StreamPeerTCP.STATUS_CONNECTING:
			return
		if status != StreamPeerTCP.STATUS_CONNECTED:
			_fail(
				(
					"connection refused or unreachable: is the gateway running, and is %d its tcp_port?"
					% _port
				)
			)
			return
		_tcp.set_no_delay(true)  # one small frame per request: Nagle would add 40 ms
		if not _use_tls:
			_stream = _tcp
			state = "open"
			return
		_tls = StreamPeerTLS.new()
		var err := _tls.connect_to_stream(_tcp, _tls_hostname, _tls_options)
		if err != OK:  # the first handshake step already failed: nearly always the certificate
			_fail_tls()
			return
		_tls.poll()
	var tls_status := _tls.get_status()
	if tls_status == StreamPeerTLS.STATUS_HANDSHAKING:
		return
	if tls_status == StreamPeerTLS.STATUS_CONNECTED:
		_stream = _tls
		state = "open"
	elif tls_status == StreamPeerTLS.STATUS_ERROR_HOSTNAME_MISMATCH:
		_fail(
			(
				"TLS: the gateway's certificate is not for '%s' (set tls_hostname to a name it carries)"
				% _tls_hostname
			),
			"tls_error"
		)
	else:
		_fail_tls()


# Write all the bytes; false (and closed) if the connection broke.
func send(bytes: PackedByteArray) -> bool:
	if state != "open":
		return false
	var err := _stream.put_data(bytes)
	if err != OK:
		_fail("the connection to %s broke while sending (error %d)" % [_address, err])
		return false
	return true


# Every byte that has arrived (possibly none). Detects the gateway closing the
# connection: then state becomes "closed". (Godot 4's StreamPeerTCP.poll() closes the
# peer on a FIN only once no unread byte is left, so an ERROR the gateway wrote before
# closing is read first; a closed peer is not read: that prints engine errors.)
func receive() -> PackedByteArray:
	if state != "open":
		return PackedByteArray()
	poll()
	var live := false
	if _tls == null:
		live = _tcp.get_status() == StreamPeerTCP.STATUS_CONNECTED
	else:
		live = _tls.get_status() == StreamPeerTLS.STATUS_CONNECTED
	if not live:
		_fail("the gateway closed the connection to %s" % _address)
		return PackedByteArray()
	var available := _stream.get_available_bytes()
	if available <= 0:
		return PackedByteArray()
	var result := _stream.get_partial_data(available)
	if result[0] != OK:
		_fail("the connection to %s broke (error %d)" % [_address, result[0]])
	return result[1]


func close() -> void:
	if _tls != null:
		_tls.disconnect_from_stream()
	if _tcp != null:
		_tcp.disconnect_from_host()
	_tls = null
	_tcp = null
	_stream = null
	state = "closed"


func _fail_tls() -> void:
	_fail(
		(
			(
				"TLS handshake with %s failed: the certificate is not trusted (pass the gateway's"
				+ " certificate as the one to trust, or set tls_hostname to a name on it)"
				+ " or the gateway does not speak TLS"
			)
			% _address
		),
		"tls_error"
	)


func _fail(text: String, code := "connection_closed") -> void:
	close()
	error_text = text
	error_code = code
