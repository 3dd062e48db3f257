# A game with illegal moves, for action masks: clients/python/rllink_clients/choice_envs.py's MaskedPick
# in GDScript. Six items with values drawn uniformly in [0, 1], three of them forbidden
# at random each step. Observation: the six values, then the mask (1 allowed). The
# action picks an item; its value is the reward. Truncated after 10 steps. Picking among
# the allowed at random returns 5.0 on average, the best allowed item 7.5.
#
# A forbidden pick is counted in `forbidden_taken` (and rewarded 0): the example stops
# at the first one (exit 4), so a run that ends otherwise never took one.
extends Reference

const ITEMS = 6
const FORBIDDEN = 3
const LENGTH = 10

var values = []
var mask = []       # 1 allowed, 0 forbidden: what get_action_mask() hands the gateway
var steps = 0
var total_steps = 0
var forbidden_taken = 0
var last_forbidden = ""
var rng = RandomNumberGenerator.new()


func _init(seed_value := 0) -> void:
	rng.seed = seed_value


func reset() -> Array:
	steps = 0
	return _draw()


func observation() -> Array:
	var obs = values.duplicate()
	for m in mask:
		obs.append(float(m))
	return obs


# The most valuable allowed item: the best allowed return (7.5 on average).
func best_allowed() -> int:
	var best = -1
	for i in range(ITEMS):
		if mask[i] == 1 and (best < 0 or values[i] > values[best]):
			best = i
	return best


# {reward, terminated, truncated}; the next step's items are drawn at once.
func step(action: int) -> Dictionary:
	var reward = 0.0
	if action < 0 or action >= ITEMS or mask[action] == 0:
		forbidden_taken += 1
		last_forbidden = "item %d with the mask %s" % [action, str(mask)]
	else:
		reward = values[action]
	steps += 1
	total_steps += 1
	_draw()
	return {"reward": reward, "terminated": false, "truncated": steps >= LENGTH}


func _draw() -> Array:
	values = []
	mask = []
	for i in range(ITEMS):
		values.append(rng.randf())
		mask.append(1)
	var forbidden = 0
	while forbidden < FORBIDDEN:
		var i = rng.randi() % ITEMS
		if mask[i] == 1:
			mask[i] = 0
			forbidden += 1
	return observation()
