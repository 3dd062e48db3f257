# A policy in the game: the GDScript MLP runtime and the action sampler together, for
# the two modes that act in the game (local: SET_STATE's models; model_file: a bundled
# .onnx). act() checks the game's mask as the gateway would, runs the model, samples.
# A recurrent model (state_size > 0) takes the agent's state with each observation and
# gives the next one back ("state" in act()'s result); the session keeps it. A module with
# SET_CONFIG's action_noise "pink" samples its Box with pink noise (new_noise() at each
# episode's start; its step() each step, into act()); the session keeps that too.
extends RefCounted

const MlpPolicy = preload("res://addons/rllink/rllink_mlp_policy.gd")
const ActionSampler = preload("res://addons/rllink/rllink_action_sampler.gd")
const PinkNoise = preload("res://addons/rllink/rllink_pink_noise.gd")

var policy = MlpPolicy.new()
var sampler
var module := {}  # {module_id, observation_space, action_space, action_distribution, action_noise}
var state_size := 0  # the model's recurrent state width (SET_CONFIG's state_size); 0: none


func _init(seed_value := 0) -> void:
	sampler = ActionSampler.new(seed_value)


func is_loaded() -> bool:
	return policy.is_loaded()


# Load plain ONNX bytes for `module_info` (its spaces, input and output names, mask
# input, distribution); "" or why the model cannot run here.
func load_model(model: PackedByteArray, module_info: Dictionary) -> String:
	var outputs: Array = module_info.get("onnx_output_names", [])
	var shape: Array = []
	for n in module_info.get("observation_space", {}).get("shape", []):
		shape.append(int(n))
	var mask_input = module_info.get("onnx_action_mask_input_name")
	var loaded: bool = policy.load_model(
		model,
		str(module_info.get("onnx_input_name", "")),
		str(outputs[0]) if outputs.size() > 0 else "",
		shape,
		mask_input if typeof(mask_input) == TYPE_STRING else ""
	)
	if not loaded:
		return policy.error_message
	# SET_CONFIG's state_size for the module (absent: an older gateway, or model_file)
	var declared = module_info.get("state_size")
	if declared != null and int(declared) != policy.state_size:
		return (
			"module '%s' has state_size %d in SET_CONFIG but its model's state_in holds %d"
			% [str(module_info.get("module_id", "")), int(declared), policy.state_size]
		)
	module = module_info
	state_size = policy.state_size
	return ""


# A recurrent module's state at an episode's start ([] for a feed-forward one).
func zero_state() -> Array:
	return policy.zero_state()


# The pink noise of an episode starting now (its processes drawn anew, from the sampler's
# rng), or null where the module samples white noise (action_noise "white" or absent,
# a model_file's, or no Box).
func new_noise():
	var dim := PinkNoise.pink_dim(module)
	return PinkNoise.new(sampler.rng, dim) if dim > 0 else null


# One decision: {"action" (to act on), "sampled" (to train on), "logp", "mask" (as fed
# to the model; [] for an unmasked one), "state" (a recurrent model's state_out, to feed
# with the next observation; [] for a feed-forward one)} or {"error"} for a mask the
# gateway would refuse. state: the state fed with obs (empty: zeros, an episode's start);
# noise: the step's pink draws (empty: white ones).
func act(obs, mask: Array, explore: bool, state := [], noise := []) -> Dictionary:
	var space: Dictionary = module.get("action_space", {})
	if not mask.is_empty():
		var problem := ""
		if not policy.is_masked():
			problem = (
				(
					"get_action_mask() gave a mask, but module '%s' takes no action masks"
					% str(module.get("module_id", ""))
				)
				+ " (set the gateway's action_masking)"
			)
		else:
			problem = ActionSampler.mask_error(mask, space)
		if problem != "":
			var details := {"field": "action_mask"}
			return {"error": {"code": "invalid_message", "message": problem, "details": details}}
	# explore off: a gSDE exploring model's noise-free output (the most likely action's)
	var stepped: Dictionary = policy.step(obs, state, mask, not explore)
	if stepped.is_empty():
		var text := "the model could not run on this observation (see the pushed error)"
		return {"error": {"code": "model_error", "message": text, "details": null}}
	var outputs: Array = stepped.output
	var distribution := str(module.get("action_distribution", "categorical"))
	var sampled: Dictionary = sampler.sample(outputs, distribution, space, explore, noise)
	var action = sampled.action
	if distribution == "gaussian":  # the sample is trained on, the clipped one acted on
		action = ActionSampler.clip(action, space)
	var used: Array = []
	if policy.is_masked():
		used = mask if not mask.is_empty() else _ones(policy.mask_width)
	return {
		"action": action,
		"sampled": sampled.action,
		"logp": sampled.logp,
		"mask": used,
		"state": stepped.state
	}


static func _ones(count: int) -> Array:
	var ones: Array = []
	for i in range(count):
		ones.append(1)
	return ones
