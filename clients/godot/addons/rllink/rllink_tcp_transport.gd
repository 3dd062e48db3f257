# The raw TCP transport (the gateway's TCP bridge, its tcp_port), optionally TLS
# (StreamPeerSSL over the StreamPeerTCP). Non-blocking: open() starts connecting,
# poll() moves it on; state is "connecting", "open" or "closed" (then error_text says
# why). Not available in HTML5 exports (browsers have no raw sockets): use the
# WebSocket transport there.
extends Reference

var state = "closed"
var error_text = ""
var error_code = "connection_closed"  # or "tls_error": a certificate problem, not worth retrying

var _tcp: StreamPeerTCP = null
var _tls: StreamPeerSSL = null
var _stream = null  # what is read and written: the TCP peer, or the TLS one over it
var _use_tls = false
var _tls_hostname = ""
var _tls_certificate = null  # X509Certificate to trust (a self-signed one), or null: the system's CAs
var _address = ""
var _port = 0


# Start connecting. tls_certificate_path: a PEM certificate to trust (empty: the
# system's CAs); tls_hostname: the name the certificate must carry (empty: host).
func open(host: String, port: int, use_tls := false, tls_certificate_path := "", tls_hostname := "") -> void:
	close()
	_address = "%s:%d" % [host, port]
	_port = port
	_use_tls = use_tls
	_tls_hostname = tls_hostname if tls_hostname != "" else host
	_tls_certificate = null
	if use_tls and tls_certificate_path != "":
		_tls_certificate = X509Certificate.new()
		if _tls_certificate.load(tls_certificate_path) != OK:
			_fail("cannot read the TLS certificate %s" % tls_certificate_path, "tls_error")
			return
	_tcp = StreamPeerTCP.new()
	var err = _tcp.connect_to_host(host, port)
	if err != OK:
		_fail("cannot start connecting (error %d): is the host name right?" % err)
		return
	state = "connecting"
	error_text = ""
	error_code = "connection_closed"


func poll() -> void:
	if state != "connecting":
		if _tls != null and state == "open":
			_tls.poll()
		return
	if _tls == null:
		var status = _tcp.get_status()
		if status == StreamPeerTCP.STATUS_CONNECTING:
			return
		if status != StreamPeerTCP.STATUS_CONNECTED:
			_fail("connection refused or unreachable: is the gateway running, and is %d its tcp_port?" % _port)
			return
		_tcp.set_no_delay(true)  # one small frame per request: Nagle would add 40 ms
		if not _use_tls:
			_stream = _tcp
			state = "open"
			return
		_tls = StreamPeerSSL.new()
		_tls.blocking_handshake = false
		var err = _tls.connect_to_stream(_tcp, true, _tls_hostname, _tls_certificate)
		if err != OK:  # the first handshake step already failed: nearly always the certificate
			_fail_tls()
			return
	_tls.poll()
	var tls_status = _tls.get_status()
	if tls_status == StreamPeerSSL.STATUS_HANDSHAKING:
		return
	if tls_status == StreamPeerSSL.STATUS_CONNECTED:
		_stream = _tls
		state = "open"
	elif tls_status == StreamPeerSSL.STATUS_ERROR_HOSTNAME_MISMATCH:
		_fail("TLS: the gateway's certificate is not for '%s' (set tls_hostname to a name it carries)" % _tls_hostname, "tls_error")
	else:
		_fail_tls()


# Write all the bytes; false (and closed) if the connection broke.
func send(bytes: PoolByteArray) -> bool:
	if state != "open":
		return false
	var err = _stream.put_data(bytes)
	if err != OK:
		_fail("the connection to %s broke while sending (error %d)" % [_address, err])
		return false
	return true


# Every byte that has arrived (possibly none). Detects the gateway closing the
# connection: then state becomes "closed".
func receive() -> PoolByteArray:
	if state != "open":
		return PoolByteArray()
	var available = _stream.get_available_bytes()
	# Asking for at least one byte makes the peer notice an end of stream.
	var result = _stream.get_partial_data(max(available, 1))
	var err = result[0]
	if err != OK:
		var got = result[1]
		_fail("the gateway closed the connection" if err == ERR_FILE_EOF else "the connection to %s broke (error %d)" % [_address, err])
		return got
	if _tls == null and _tcp.get_status() != StreamPeerTCP.STATUS_CONNECTED:
		_fail("the connection to %s broke" % _address)
	elif _tls != null and _tls.get_status() != StreamPeerSSL.STATUS_CONNECTED:
		_fail("the TLS connection to %s closed" % _address)
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
	_fail(("TLS handshake with %s failed: the certificate is not trusted (pass the gateway's certificate as the one to trust;"
		+ " for an IP address set tls_hostname to a DNS name on the certificate, e.g. localhost: Godot 3 cannot check IP names)"
		+ " or the gateway does not speak TLS") % _address, "tls_error")


func _fail(text: String, code := "connection_closed") -> void:
	close()
	error_text = text
	error_code = code
