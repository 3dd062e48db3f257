# model_file mode: the game plays a trained policy from a bundled .onnx file (the
# gateway's GET /api/model.onnx, or runs/<run_id>/models/<module_id>/latest.onnx), with
# no gateway at all: nothing is sent, nothing trains. The model's metadata (written by
# the gateway's export) gives its spaces and the output layout, hence the distribution.
# A recurrent model (a state_in input) plays with its state carried: zeros at an
# episode's start, each step's state_out fed with the next observation.
# A Box samples white N(0, 1) draws where explore is on: a bundled model has no
# SET_CONFIG, hence no action_noise (pink exploration is for training); a shipped game
# plays the mode (explore off).
extends "res://addons/rllink/rllink_session.gd"

const PolicyRunner = preload("res://addons/rllink/rllink_policy_runner.gd")
const ActionSampler = preload("res://addons/rllink/rllink_action_sampler.gd")

var runner
var model_path := ""

var _load_error = null  # why the model could not be loaded (null: loaded)
var _obs = null
var _mask: Array = []
var _state: Array = []  # a recurrent model's state to feed with _obs ([]: zeros)


# path: res://, user:// or an absolute path to the .onnx file.
func _init(path: String, seed_value := 0) -> void:
	model_path = path
	runner = PolicyRunner.new(seed_value)
	_load_error = _load()


func mode() -> String:
	return "model_file"


func needs_gateway() -> bool:
	return false


func action_space() -> Dictionary:
	return runner.module.get("action_space", {})


func begin_step(obs, mask := []) -> void:
	_obs = obs
	_mask = mask


func poll_step():
	if _load_error != null:
		return {"error": _load_error}
	if _state.size() != runner.state_size:  # an episode's start
		_state = runner.zero_state()
	var decided: Dictionary = runner.act(_obs, _mask, explore, _state)
	if decided.has("error"):
		decided.error["request"] = ""
		return decided
	_state = decided.state
	env_steps += 1
	return {"action": decided.action, "weights_seq_no": weights_seq_no}


func end_episode(_final_obs, _terminated: bool, _truncated: bool) -> void:
	_state = []  # the next episode starts with no memory


func _load():
	if model_path == "":
		return error_info("model_error", "inference is model_file but model_path is empty")
	var model := FileAccess.get_file_as_bytes(model_path)
	if model.is_empty():
		var text := (
			"cannot read the model %s (error %d)" % [model_path, FileAccess.get_open_error()]
		)
		return error_info("model_error", text)
	var probe = runner.policy
	if not probe.load_model(model):
		return error_info("model_error", "cannot run %s: %s" % [model_path, probe.error_message])
	var meta: Dictionary = probe.metadata
	var observation_space = JSON.parse_string(str(meta.get("observation_space", "")))
	var space = JSON.parse_string(str(meta.get("action_space", "")))
	if typeof(space) != TYPE_DICTIONARY or typeof(observation_space) != TYPE_DICTIONARY:
		var text := (
			"%s has no observation_space / action_space in its metadata: use a model the"
			+ " gateway exported"
		)
		return error_info("model_error", text % model_path)
	var squashed := str(meta.get("output_layout", "")).find("squashed_gaussian") >= 0
	var module := {
		"module_id": model_path.get_file(),
		"observation_space": observation_space,
		"action_space": space,
		"onnx_input_name": str(meta.get("input_name", "")),
		"action_distribution": ActionSampler.distribution_for(space, squashed),
	}
	var problem: String = runner.load_model(model, module)
	if problem != "":
		return error_info("model_error", "cannot run %s: %s" % [model_path, problem])
	weights_seq_no = int(str(meta.get("weights_seq_no", "-1")))
	return null
