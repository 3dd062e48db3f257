# Runs an ONNX policy with the addon's GDScript runtime (rllink_mlp_policy.gd), for
# tests that compare it with onnxruntime (tests/test_godot_kit.py):
#
#   godot3-server --path clients/godot/example -s res://tools/onnx_run.gd -- model.onnx obs.json [2x3] [masks.json]
#
# obs.json holds a JSON list of observations (each flattened); the optional shape is
# one observation's (default: its length); masks.json (a masked model's) one action
# mask per observation, 0/1 per logit ([] for all allowed). Prints one line
# "META <json>" (the model's metadata and input/output names), then "OUT <json>" per
# observation: the model's first output (and "NOISE_FREE <json>", a gSDE exploring model's
# noise-free output, where it has one). A recurrent model (state_in/state_out) runs the
# observations as one episode's steps: zeros first, each step's state_out fed to the
# next, and "STATE <json>" follows each OUT line. Exits 0, or 1 with "ERROR <text>".
extends SceneTree

const MlpPolicy = preload("res://addons/rllink/rllink_mlp_policy.gd")
const JsonWriter = preload("res://addons/rllink/rllink_json.gd")


func _init() -> void:
	var args = Array(OS.get_cmdline_args())
	var separator = args.find("--")
	args = args.slice(separator + 1, args.size() - 1) if separator >= 0 and separator + 1 < args.size() else []
	if args.size() < 2:
		_stop("usage: -s res://tools/onnx_run.gd -- model.onnx obs.json [shape like 2x3]")
		return
	var model_file = File.new()
	if model_file.open(args[0], File.READ) != OK:
		_stop("cannot read " + args[0])
		return
	var model = model_file.get_buffer(model_file.get_len())
	model_file.close()
	var obs_file = File.new()
	if obs_file.open(args[1], File.READ) != OK:
		_stop("cannot read " + args[1])
		return
	var observations = parse_json(obs_file.get_as_text())
	obs_file.close()
	var shape = []
	var masks = []
	var extra = args.slice(2, args.size() - 1) if args.size() > 2 else []
	for arg in extra:
		if arg.ends_with(".json"):
			var masks_file = File.new()
			if masks_file.open(arg, File.READ) != OK:
				_stop("cannot read " + arg)
				return
			masks = parse_json(masks_file.get_as_text())
			masks_file.close()
		else:
			for n in arg.split("x"):
				shape.append(int(n))
	var policy = MlpPolicy.new()
	if not policy.load_model(model, "", "", shape):
		_stop(policy.error_message)
		return
	print("META " + to_json({"input_name": policy.input_name, "output_name": policy.output_name,
		"noise_free_output": policy.noise_free_output,
		"mask_input_name": policy.mask_input_name, "mask_width": policy.mask_width, "state_size": policy.state_size,
		"metadata": policy.metadata}))
	var started = OS.get_ticks_usec()
	var state = policy.zero_state()
	for i in range(observations.size()):
		var out = []
		var state_out = []
		if policy.is_recurrent():
			var stepped = policy.step(observations[i], state, masks[i] if i < masks.size() else [])
			if stepped.empty():
				_stop("the model did not run")
				return
			out = stepped.output
			state_out = stepped.state
		else:
			out = policy.run(observations[i], masks[i] if i < masks.size() else [])
		print("OUT " + _json(out))
		if policy.is_recurrent():
			print("STATE " + _json(state_out))
			state = state_out
		if policy.noise_free_output != "":
			print("NOISE_FREE " + _json(policy.run(observations[i], masks[i] if i < masks.size() else [], true)))
	print("USEC_PER_RUN %d" % ((OS.get_ticks_usec() - started) / max(1, observations.size())))
	quit(0)


static func _json(values: Array) -> String:
	var parts = PoolStringArray()
	for v in values:
		parts.append(JsonWriter.number(v))  # 9 significant digits (to_json keeps 6 decimals)
	return "[" + parts.join(",") + "]"


func _stop(text: String) -> void:
	print("ERROR " + text)
	quit(1)
