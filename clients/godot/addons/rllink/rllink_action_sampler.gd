# Local inference: turns the model's output (action_dist_inputs) into an action and its
# log-prob, by the gateway's rules (rllink/action_dists.py), so that the experience sent
# back trains as the gateway expects.
#   categorical        k logits -> an int in 0..k-1 (explore false: the most likely)
#   multi_categorical  the logits of each sub-action, one after the other -> [ints]
#   gaussian           means then log stds -> the unclipped sample (train on it; clip
#                      it to the box before acting: clip())
#   squashed_gaussian  means then log stds of u -> low + (tanh(u) + 1) / 2 * (high - low)
# A masked model's forbidden logits are about -1e8: their probability is exactly 0, so
# they are never sampled (nor the most likely).
# A Gaussian's N(0, 1) draws are white (this rng's, new each sample) unless the caller
# gives its own: pink ones (rllink_pink_noise.gd, SET_CONFIG's action_noise "pink").
extends Reference

const LOG_SQRT_2PI = 0.91893853320467274178  # 0.5 * log(2 pi)

var rng = RandomNumberGenerator.new()


func _init(seed_value := 0) -> void:
	rng.seed = seed_value


# {"action": int | Array, "logp": float} for one row of the model's output. space: the
# module's action space from SET_CONFIG (nvec, low, high are read from it). noise: a
# Box's N(0, 1) draws, one per action value (pink noise's step()); empty: white ones.
func sample(dist_inputs: Array, distribution: String, space: Dictionary, explore := true, noise := []) -> Dictionary:
	match distribution:
		"categorical":
			return _categorical(dist_inputs, explore)
		"multi_categorical":
			var actions = []
			var logp = 0.0
			var offset = 0
			for n in space.get("nvec", []):
				var part = _categorical(dist_inputs.slice(offset, offset + int(n) - 1), explore)
				actions.append(part.action)
				logp += part.logp
				offset += int(n)
			return {"action": actions, "logp": logp}
		"gaussian":
			return _gaussian(dist_inputs, explore, false, space, noise)
		"squashed_gaussian":
			return _gaussian(dist_inputs, explore, true, space, noise)
	push_error("RLlink: action distribution '%s' is not one this kit samples" % distribution)
	return {"action": 0, "logp": 0.0}


func _categorical(logits: Array, explore: bool) -> Dictionary:
	var top = -INF
	for l in logits:
		top = max(top, l)
	var total = 0.0
	for l in logits:
		total += exp(l - top)
	var log_sum = top + log(total)
	var action = 0
	if explore:
		var u = rng.randf()
		var cdf = 0.0
		action = -1
		var last_possible = 0  # if rounding leaves u above the cdf: never a forbidden action
		for i in range(logits.size()):
			var p = exp(logits[i] - log_sum)
			if p > 0.0:
				last_possible = i
			cdf += p
			if u < cdf:
				action = i
				break
		if action < 0:
			action = last_possible
	else:
		for i in range(1, logits.size()):
			if logits[i] > logits[action]:
				action = i
	return {"action": action, "logp": logits[action] - log_sum}


func _gaussian(dist_inputs: Array, explore: bool, squashed: bool, space: Dictionary, draws: Array) -> Dictionary:
	var d = dist_inputs.size() / 2
	var action = []
	var logp = 0.0
	for i in range(d):
		var low = bound(space, "low", i, -1.0)
		var high = bound(space, "high", i, 1.0)
		var scale = (high - low) / 2.0
		var mean = dist_inputs[i]
		var log_std = dist_inputs[d + i]
		var noise = 0.0  # explore false: the mean
		if explore:
			noise = draws[i] if not draws.empty() else rng.randfn(0.0, 1.0)
		var u = mean + exp(log_std) * noise
		logp += -0.5 * noise * noise - log_std - LOG_SQRT_2PI
		if squashed:
			var t = tanh(u)
			action.append(t * scale + (high + low) / 2.0)
			logp -= log(scale * (1.0 - t * t) + 1e-6)
		else:
			action.append(u)
	return {"action": action, "logp": logp}


# Why an action mask (one value per logit, from the game) does not fit the action
# space, as the gateway would refuse it; "" if it does. Each sub-action needs one
# allowed value.
static func mask_error(mask: Array, space: Dictionary) -> String:
	var nvec = []
	if str(space.get("type", "")) == "discrete":
		nvec = [int(space.get("n", 0))]
	else:
		for n in space.get("nvec", []):
			nvec.append(int(n))
	var width = 0
	for n in nvec:
		width += n
	if mask.size() != width:
		return "action_mask must hold %d values, one per logit, got %d" % [width, mask.size()]
	var offset = 0
	for part in range(nvec.size()):
		var allowed = false
		for i in range(offset, offset + nvec[part]):
			if not (typeof(mask[i]) in [TYPE_INT, TYPE_REAL, TYPE_BOOL] and float(mask[i]) in [0.0, 1.0]):
				return "action_mask must hold 0/1 (or false/true) values only, got %s" % str(mask[i])
			allowed = allowed or float(mask[i]) == 1.0
		if not allowed:
			return "action_mask allows no action%s: at least one must be allowed" % (" for sub-action %d" % part if nvec.size() > 1 else "")
		offset += nvec[part]
	return ""


# A box action clipped to the space's bounds (what the game should act on).
static func clip(action: Array, space: Dictionary) -> Array:
	var clipped = []
	for i in range(action.size()):
		clipped.append(clamp(action[i], bound(space, "low", i, -INF), bound(space, "high", i, INF)))
	return clipped


# The box's bound `key` ("low" or "high") for value i: a number, a list, or absent.
static func bound(space: Dictionary, key: String, i: int, fallback: float) -> float:
	var value = space.get(key)
	if value == null:
		return fallback
	if typeof(value) == TYPE_ARRAY:
		return float(value[i]) if i < value.size() and value[i] != null else fallback
	return float(value)
