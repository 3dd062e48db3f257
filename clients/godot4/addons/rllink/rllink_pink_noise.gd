# Pink action noise (Eberhard et al. 2023, "Pink Noise Is All You Need"): a Box
# action's N(0, 1) draws that drift over tens to hundreds of steps instead of being new
# each step, so an exploring agent keeps pushing one way long enough to find what white
# noise never reaches (a car rocking up to a flag). Each draw is still N(0, 1), so the
# sample and its log-prob are computed as with white noise (rllink_action_sampler.gd).
#
# SET_CONFIG's action_noise "pink" (the docs' "Exploration noise"; every kit computes
# the same, the Python reference is rllink.action_dists.PinkNoise): one agent's episode
# holds, per action value, six AR(1) processes x_k <- a_k x_k + sqrt(1 - a_k^2) e_k
# (e_k a new N(0, 1), a_k = exp(-1 / tau_k)) with time constants tau_k = 1, 4, 16, 64,
# 256, 1024 steps, each drawn N(0, 1) at the episode's start (new(): one per episode);
# step(), before each action, advances them and gives their sum / sqrt(6).
extends RefCounted

const TIME_CONSTANTS = [1.0, 4.0, 16.0, 64.0, 256.0, 1024.0]

var dim := 0  # the action values (the Box's flattened size)
var _rng: RandomNumberGenerator  # the sampler's (one seed for both)
var _processes: Array = []  # x_k of value i at [k * dim + i]


func _init(rng: RandomNumberGenerator, action_dim: int) -> void:
	_rng = rng
	dim = action_dim
	for _j in range(TIME_CONSTANTS.size() * dim):
		_processes.append(rng.randfn(0.0, 1.0))


# The action values' draws for this step ([dim] floats, each N(0, 1)); call it every step
# of the episode, also one that does not explore (whose sample ignores them).
func step() -> Array:
	var draws: Array = []
	for _i in range(dim):
		draws.append(0.0)
	for k in range(TIME_CONSTANTS.size()):
		var decay := exp(-1.0 / TIME_CONSTANTS[k])
		var innovation := sqrt(1.0 - decay * decay)
		for i in range(dim):
			var j := k * dim + i
			_processes[j] = decay * _processes[j] + innovation * _rng.randfn(0.0, 1.0)
			draws[i] += _processes[j]
	for i in range(dim):
		draws[i] /= sqrt(TIME_CONSTANTS.size())
	return draws


# The action values an agent of `module` (its SET_CONFIG entry) samples pink noise for:
# the Box's size where action_noise is "pink" and the kit samples a Gaussian; 0 where the
# draws are white (absent, "white", or an action space without Gaussian draws).
static func pink_dim(module: Dictionary) -> int:
	var distribution := str(module.get("action_distribution", ""))
	if str(module.get("action_noise", "white")) != "pink":
		return 0
	if not (distribution in ["gaussian", "squashed_gaussian"]):
		return 0
	var size := 1
	for n in module.get("action_space", {}).get("shape", [1]):
		size *= int(n)
	return size
