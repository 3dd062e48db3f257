# Runs an ONNX policy with the addon's GDScript runtime (rllink_mlp_policy.gd), for
# tests that compare it with onnxruntime (tests/test_godot4_kit.py, with a Godot 4):
#
#   godot4 --headless --path clients/godot4/example -s res://tools/onnx_run.gd -- \
#       model.onnx obs.json [2x3] [masks.json]
#
# obs.json holds a JSON list of observations (each flattened); the optional shape is
# one observation's (default: its length); masks.json (a masked model's) one action
# mask per observation, 0/1 per logit ([] for all allowed). Prints one line
# "META <json>" (the model's metadata and input/output names), then "OUT <json>" per
# observation: the model's first output (and "NOISE_FREE <json>", a gSDE exploring model's
# noise-free output, where it has one). A recurrent model (a state_in input) runs the
# observations as one episode, in order: zeros as the first state_in, then each step's
# state_out as the next one's; "STATE <json>" (the step's state_out) follows each OUT.
# Exits 0, or 1 with "ERROR <text>".
extends SceneTree

const MlpPolicy = preload("res://addons/rllink/rllink_mlp_policy.gd")
const JsonWriter = preload("res://addons/rllink/rllink_json.gd")


func _initialize() -> void:
	var args := Array(OS.get_cmdline_user_args())
	if args.size() < 2:
		_stop(
			"usage: -s res://tools/onnx_run.gd -- model.onnx obs.json [shape like 2x3] [masks.json]"
		)
		return
	var model := FileAccess.get_file_as_bytes(args[0])
	if model.is_empty():
		_stop("cannot read " + args[0])
		return
	var observations = JSON.parse_string(FileAccess.get_file_as_string(args[1]))
	if typeof(observations) != TYPE_ARRAY:
		_stop("cannot read a JSON list from " + args[1])
		return
	var shape: Array = []
	var masks = []
	for arg in args.slice(2):
		if arg.ends_with(".json"):
			masks = JSON.parse_string(FileAccess.get_file_as_string(arg))
		else:
			for n in arg.split("x"):
				shape.append(int(n))
	var policy = MlpPolicy.new()
	if not policy.load_model(model, "", "", shape):
		_stop(policy.error_message)
		return
	var meta := {
		"input_name": policy.input_name,
		"output_name": policy.output_name,
		"noise_free_output": policy.noise_free_output,
		"mask_input_name": policy.mask_input_name,
		"mask_width": policy.mask_width,
		"state_size": policy.state_size,
		"metadata": policy.metadata,
	}
	print("META " + JSON.stringify(meta))
	var started := Time.get_ticks_usec()
	var state: Array = policy.zero_state()  # [] for a feed-forward model
	for i in range(observations.size()):
		var mask: Array = masks[i] if i < masks.size() else []
		var stepped: Dictionary = policy.step(observations[i], state, mask)
		if stepped.is_empty():
			_stop("the model did not run on observation %d" % i)
			return
		print("OUT " + _json(stepped.output))  # 9 significant digits
		if policy.noise_free_output != "":
			print("NOISE_FREE " + _json(policy.step(observations[i], state, mask, true).output))
		if policy.is_recurrent():
			state = stepped.state
			print("STATE " + _json(state))
	print("USEC_PER_RUN %d" % ((Time.get_ticks_usec() - started) / maxi(1, observations.size())))
	quit(0)


static func _json(values: Array) -> String:
	var parts := PackedStringArray()
	for v in values:
		parts.append(JsonWriter.number(v))
	return "[" + ",".join(parts) + "]"


func _stop(text: String) -> void:
	print("ERROR " + text)
	quit(1)
