# The TLS client options both transports use: a pinned certificate (a self-signed
# gateway's) or the system's CAs, and the name the certificate must carry.
extends RefCounted


# {"options": TLSOptions} or {"error": text}. certificate_path: a PEM certificate to
# trust (empty: the system's CAs); hostname: the name to check on the certificate
# ("": the host connected to).
static func client_options(certificate_path: String, hostname := "") -> Dictionary:
	var certificate: X509Certificate = null
	if certificate_path != "":
		certificate = X509Certificate.new()
		if certificate.load(certificate_path) != OK:
			return {"error": "cannot read the TLS certificate %s" % certificate_path}
	return {"options": TLSOptions.client(certificate, hostname)}
