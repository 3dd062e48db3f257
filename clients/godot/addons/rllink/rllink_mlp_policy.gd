# Local inference without an ONNX runtime: reads the gateway's ONNX model (protobuf)
# and runs it in GDScript. The gateway's policies are small MLPs: Gemm and Tanh for
# PPO (Flatten first for multi-dimensional observations), plus Relu, Mul, Add and Concat
# for SAC's actor, and Sub, Mul and Add for an action mask (a masked module's model
# takes a second input, action_mask [batch, k], and outputs
# logits + (action_mask - 1) * 1e8); this also runs MatMul, Sigmoid and Identity.
# A recurrent model (a module with model.use_lstm) takes a further input, state_in
# [batch, state_size], and gives a further output, state_out: one LSTM step written out
# in Slice (opset 13: int64 starts/ends/axes inputs), Gemm, Add, Sigmoid, Tanh, Mul and
# Concat, all run here (step()/step_batch() take the state and give state_out back). A
# model with any other operator is refused at load() with its name: the CNN (Conv) of
# image observations, which is too slow for GDScript, needs thin mode. Values are
# computed in double precision from the float32 weights (elementwise Add, Sub and Mul
# round to float32, as onnxruntime does), so the outputs match onnxruntime's to ~1e-6.
#
# Cost: one multiply-add per weight per observation, in GDScript: about 1 ms for the
# default 64x64 policy. Fine for a few agents; for many agents or big networks use thin
# mode (the gateway batches every agent's observations into one onnxruntime pass).
extends Reference

const Protobuf = preload("res://addons/rllink/rllink_protobuf.gd")

# A gSDE actor's exploring SET_STATE model also outputs its action_dist_inputs without this
# version's exploration noise: the most likely action (explore off) is played from it.
const NOISE_FREE_OUTPUT = "action_dist_inputs_noise_free"
const SUPPORTED = ["Gemm", "Tanh", "Relu", "Sigmoid", "Flatten", "MatMul", "Add", "Sub", "Mul", "Concat", "Identity", "Slice"]
const IMAGE_OPS = ["Conv", "Reshape"]  # an image's or a grid's CNN (app/training/onnx_export.py)
# A recurrent model's state (RLLINK.md "Recurrent policies"): fed in before the step, out after it.
const STATE_INPUT = "state_in"
const STATE_OUTPUT = "state_out"

var metadata = {}           # the model's metadata_props (weights_seq_no, spaces, output_layout, ...)
var input_name = ""
var output_name = ""
var noise_free_output = ""  # a gSDE exploring model's second output (NOISE_FREE_OUTPUT), "" if it has none
var mask_input_name = ""    # a masked model's second input (action_mask), "" for an unmasked one
var mask_width = 0          # its values per row: one per logit
var state_size = 0          # a recurrent model's state_in/state_out width; 0 for a feed-forward one
var observation_shape = []
var error_message = ""      # why load() failed

var _nodes = []             # [{op, inputs, outputs, attrs}], in graph order (topological)
var _initializers = {}      # name -> {shape, data}


# Load a model (plain ONNX bytes, see RLlinkClient.decode_onnx). input/output names:
# SET_CONFIG's onnx_input_name and onnx_output_names[0] ("" for the graph's own);
# mask_input: its onnx_action_mask_input_name ("": the graph's second input, if any).
# Returns false and sets error_message if the model cannot be run.
func load_model(model: PoolByteArray, input := "", output := "", obs_shape := [], mask_input := "") -> bool:
	var nodes = []
	var initializers = {}
	var graph_inputs = []
	var graph_outputs = []
	var meta = {}
	error_message = ""
	var reader = Protobuf.new(model)
	while reader.next():
		if reader.field == 7:
			_read_graph(reader.sub_reader(), nodes, initializers, graph_inputs, graph_outputs)
		elif reader.field == 14:
			var entry = reader.sub_reader()
			var key = ""
			var value = ""
			while entry.next():
				if entry.field == 1:
					key = entry.string()
				elif entry.field == 2:
					value = entry.string()
				else:
					entry.skip()
			meta[key] = value
		else:
			reader.skip()
	if reader.error_message != "":
		error_message = "not an ONNX model: " + reader.error_message
		return false
	if nodes.empty():
		error_message = "the ONNX model has no graph nodes"
		return false
	for node in nodes:  # before the tensors' types: an image model's int64 shapes are not the point
		if node.op in IMAGE_OPS:
			error_message = ("the model has Conv nodes (a CNN, for image or grid observations), which this GDScript runtime"
				+ " does not run: use thin mode (the gateway runs the model)")
			return false
	for node in nodes:
		if not node.op in SUPPORTED:
			error_message = "this runtime runs %s models; this one has a %s node" % [PoolStringArray(SUPPORTED).join("/"), node.op]
			return false
		if node.op == "Slice" and (node.inputs.size() < 3 or node.attrs.has("starts")):
			error_message = "this runtime runs Slice with starts/ends as inputs (opset 10+); this model's gives them as attributes"
			return false
		if node.op == "Slice" and node.inputs.size() > 4 and node.inputs[4] != "":
			var steps = initializers.get(node.inputs[4])
			if steps == null or steps.data.count(1) != steps.data.size():
				error_message = "this runtime runs Slice with steps of 1 only (node %s)" % node.outputs[0]
				return false
		if node.op == "Slice":
			for k in range(1, min(node.inputs.size(), 4)):
				if node.inputs[k] != "" and not initializers.has(node.inputs[k]):
					error_message = "this runtime runs Slice with constant starts/ends/axes only (node %s)" % node.outputs[0]
					return false
	if error_message != "":  # set while reading (a tensor that is not float32)
		return false
	var names = []
	for info in graph_inputs:
		names.append(info.name)
	input_name = input if input != "" else (names[0] if not names.empty() else "obs")
	state_size = 0
	if STATE_INPUT in names:
		var state_dims = graph_inputs[names.find(STATE_INPUT)].shape
		state_size = int(state_dims[1]) if state_dims.size() == 2 and state_dims[1] > 0 else 0
		if state_size == 0:
			error_message = "the model's input %s is not [batch, state_size] with a fixed state_size" % STATE_INPUT
			return false
		if not STATE_OUTPUT in graph_outputs:
			error_message = "the model takes %s but has no output %s (a recurrent model gives both)" % [STATE_INPUT, STATE_OUTPUT]
			return false
	mask_input_name = mask_input
	if mask_input_name == "":
		for name in names:
			if name != input_name and name != STATE_INPUT:
				mask_input_name = name  # the gateway's models have at most one more input: the mask
				break
	mask_width = 0
	if mask_input_name != "":
		if not mask_input_name in names:
			error_message = "the model has no input named %s (the action mask)" % mask_input_name
			return false
		var dims = graph_inputs[names.find(mask_input_name)].shape
		mask_width = int(dims[1]) if dims.size() == 2 and dims[1] > 0 else 0
		if mask_width == 0:
			error_message = "the model's input %s is not [batch, k] with a fixed k" % mask_input_name
			return false
	_nodes = nodes
	_initializers = initializers
	metadata = meta
	output_name = output if output != "" else graph_outputs[0]
	noise_free_output = NOISE_FREE_OUTPUT if NOISE_FREE_OUTPUT in graph_outputs else ""
	observation_shape = obs_shape
	return true


func is_loaded() -> bool:
	return not _nodes.empty()


func is_masked() -> bool:
	return mask_input_name != ""


func is_recurrent() -> bool:
	return state_size > 0


# The zero state a recurrent model starts an episode with (state_size floats).
func zero_state() -> Array:
	var state = []
	for i in range(state_size):
		state.append(0.0)
	return state


# The model's first output for one observation (numbers, any nesting, flattened in
# row-major order): an Array of floats (logits, or means then log stds). mask: a masked
# model's action mask, one 0/1 per logit (empty: all allowed); the forbidden logits come
# out about -1e8, so their probability is 0. noise_free: a gSDE exploring model's
# noise-free output instead (the most likely action's), where it has one.
# A recurrent model runs from the zero state here: use step() to carry its state.
func run(observation, mask := [], noise_free := false) -> Array:
	return run_batch([observation], [mask], noise_free)[0]


# The outputs for several observations at once: one Array of floats per observation.
# masks: one mask per observation (or none: all allowed), for a masked model.
func run_batch(observations: Array, masks := [], noise_free := false) -> Array:
	return _run(observations, masks, noise_free, [])[0]


# One step of a recurrent model: {"output": run()'s Array, "state": state_out}, state
# being the state_in fed with this observation (zero_state() at an episode's start;
# the previous step's "state" after). A feed-forward model's "state" is [].
func step(observation, state: Array, mask := [], noise_free := false) -> Dictionary:
	var result = step_batch([observation], [state], [mask], noise_free)
	if result.empty():
		return {}
	return result[0]


# step() for several observations at once: one {"output", "state"} per observation
# (empty if a state has the wrong size).
func step_batch(observations: Array, states: Array, masks := [], noise_free := false) -> Array:
	var ran = _run(observations, masks, noise_free, states)
	var result = []
	if ran[0].size() != observations.size():
		return result
	for r in range(observations.size()):
		result.append({"output": ran[0][r], "state": ran[1][r] if r < ran[1].size() else []})
	return result


# [outputs, state_outs] (one Array of floats per observation each; no state_outs for a
# feed-forward model).
func _run(observations: Array, masks: Array, noise_free: bool, states: Array) -> Array:
	var rows = observations.size()
	var flat = []
	for obs in observations:
		_flatten_into(obs, flat)
	var width = flat.size() / max(rows, 1)
	var shape = [rows]
	if observation_shape.size() > 0:
		shape += observation_shape
	else:
		shape.append(width)
	var values = _initializers.duplicate()
	values[input_name] = {"shape": shape, "data": flat}
	if mask_input_name != "":
		var mask_data = []
		for r in range(rows):
			var mask = masks[r] if r < masks.size() else []
			if mask.empty():
				for i in range(mask_width):
					mask_data.append(1.0)
			elif mask.size() != mask_width:
				push_error("RLlink: an action mask of %d values for a model that takes %d" % [mask.size(), mask_width])
				return []
			else:
				for m in mask:
					mask_data.append(float(m))
		values[mask_input_name] = {"shape": [rows, mask_width], "data": mask_data}
	if state_size > 0:
		var state_data = []
		for r in range(rows):
			var state = states[r] if r < states.size() else []
			if state.empty():
				for i in range(state_size):
					state_data.append(0.0)
			elif state.size() != state_size:
				push_error("RLlink: a state of %d values for a model whose state_in takes %d" % [state.size(), state_size])
				return [[], []]
			else:
				for v in state:
					state_data.append(float(v))
		values[STATE_INPUT] = {"shape": [rows, state_size], "data": state_data}
	for node in _nodes:
		values[node.outputs[0]] = _evaluate(node, values)
	var name = noise_free_output if noise_free and noise_free_output != "" else output_name
	var output = values.get(name)
	if output == null:
		push_error("RLlink: the model computed no output named " + name)
		return [[], []]
	var state_outs = []
	if state_size > 0:
		var state_out = values.get(STATE_OUTPUT)
		if state_out == null or state_out.data.size() != rows * state_size:
			push_error("RLlink: the model computed no %s of %d values per row" % [STATE_OUTPUT, state_size])
			return [[], []]
		state_outs = _rows(state_out.data, rows)
	return [_rows(output.data, rows), state_outs]


static func _rows(data: Array, rows: int) -> Array:
	var columns = data.size() / rows
	var result = []
	for r in range(rows):
		result.append(data.slice(r * columns, (r + 1) * columns - 1))
	return result


static func _flatten_into(value, out: Array) -> void:
	if typeof(value) in [TYPE_ARRAY, TYPE_REAL_ARRAY, TYPE_INT_ARRAY]:
		for item in value:
			_flatten_into(item, out)
	else:
		out.append(float(value))


# -- Operators --------------------------------------------------------------------------------

func _evaluate(node: Dictionary, values: Dictionary) -> Dictionary:
	var a = values.get(node.inputs[0]) if node.inputs.size() > 0 else null
	var b = values.get(node.inputs[1]) if node.inputs.size() > 1 and node.inputs[1] != "" else null
	match node.op:
		"Gemm":
			var c = values.get(node.inputs[2]) if node.inputs.size() > 2 and node.inputs[2] != "" else null
			return _gemm(a, b, c, node.attrs.get("alpha", 1.0), node.attrs.get("beta", 1.0),
				node.attrs.get("transA", 0) != 0, node.attrs.get("transB", 0) != 0)
		"MatMul":
			return _gemm(a, b, null, 1.0, 0.0, false, false)
		"Tanh":
			var y = []
			for x in a.data:
				y.append(tanh(x))
			return {"shape": a.shape, "data": y}
		"Relu":
			var y = []
			for x in a.data:
				y.append(x if x > 0.0 else 0.0)
			return {"shape": a.shape, "data": y}
		"Sigmoid":
			var y = []
			for x in a.data:
				y.append(1.0 / (1.0 + exp(-x)))
			return {"shape": a.shape, "data": y}
		"Identity":
			return a
		"Flatten":
			var axis = int(node.attrs.get("axis", 1))
			if axis < 0:
				axis += a.shape.size()
			var outer = 1
			var inner = 1
			for i in range(a.shape.size()):
				if i < axis:
					outer *= a.shape[i]
				else:
					inner *= a.shape[i]
			return {"shape": [outer, inner], "data": a.data}
		"Add", "Sub", "Mul":
			return _broadcast(a, b, node.op)
		"Concat":
			return _concat(node, values)
		"Slice":
			return _slice(node, values)
	push_error("RLlink: unsupported operator " + node.op)
	return a


# Y = alpha * A' B' + beta * C, A' = A or its transpose (2-D), C broadcast over rows.
static func _gemm(a: Dictionary, b: Dictionary, c, alpha: float, beta: float, trans_a: bool, trans_b: bool) -> Dictionary:
	var m = a.shape[1] if trans_a else a.shape[0]
	var k = a.shape[0] if trans_a else a.shape[1]
	var n = b.shape[0] if trans_b else b.shape[1]
	var ad = a.data
	var bd = b.data
	var y = []
	y.resize(m * n)
	for row in range(m):
		for col in range(n):
			var total = 0.0
			if trans_b and not trans_a:  # the gateway's layout: both rows contiguous
				var ao = row * k
				var bo = col * k
				for i in range(k):
					total += ad[ao + i] * bd[bo + i]
			else:
				for i in range(k):
					var av = ad[i * m + row] if trans_a else ad[row * k + i]
					var bv = bd[col * k + i] if trans_b else bd[i * n + col]
					total += av * bv
			var bias = 0.0
			if c != null:
				var cd = c.data
				if cd.size() == 1:
					bias = cd[0]
				elif cd.size() == n:
					bias = cd[col]
				else:
					bias = cd[row * n + col]
			y[row * n + col] = alpha * total + beta * bias
	return {"shape": [m, n], "data": y}


# Elementwise Add, Sub or Mul; the smaller operand repeats (a scalar, or a row over
# rows). The result is rounded to float32 as onnxruntime's is: a masked logit,
# logit - 1e8, then matches it exactly (float32 keeps a multiple of 8 there).
static func _broadcast(a: Dictionary, b: Dictionary, op: String) -> Dictionary:
	var swapped = b.data.size() > a.data.size()
	var big = b if swapped else a
	var small = a if swapped else b
	var sd = small.data
	var count = sd.size()
	var y = []
	var i = 0
	for x in big.data:
		var other = sd[i % count]
		var left = other if swapped else x
		var right = x if swapped else other
		match op:
			"Add":
				y.append(left + right)
			"Sub":
				y.append(left - right)
			_:
				y.append(left * right)
		i += 1
	return {"shape": big.shape, "data": Array(PoolRealArray(y))}  # PoolRealArray holds float32


# Concat of 2-D tensors along axis 1 (SAC's [mean, log_std]) or axis 0.
static func _concat(node: Dictionary, values: Dictionary) -> Dictionary:
	var parts = []
	for name in node.inputs:
		parts.append(values[name])
	var axis = int(node.attrs.get("axis", 1))
	if axis < 0:
		axis += parts[0].shape.size()
	var rows = parts[0].shape[0]
	var y = []
	if axis == 0:
		var total_rows = 0
		for part in parts:
			y += part.data
			total_rows += part.shape[0]
		return {"shape": [total_rows] + Array(parts[0].shape).slice(1, parts[0].shape.size() - 1), "data": y}
	var width = 0
	for part in parts:
		width += part.data.size() / rows
	for r in range(rows):
		for part in parts:
			var cols = part.data.size() / rows
			for i in range(cols):
				y.append(part.data[r * cols + i])
	return {"shape": [rows, width], "data": y}


# Slice (opset 10+): starts, ends and (optionally) axes as int64 inputs, steps of 1.
# Negative starts/ends count from the end; both are clamped to the dimension.
static func _slice(node: Dictionary, values: Dictionary) -> Dictionary:
	var a = values[node.inputs[0]]
	var shape = Array(a.shape)
	var dims = shape.size()
	var starts = values[node.inputs[1]].data
	var ends = values[node.inputs[2]].data
	var axes = []
	if node.inputs.size() > 3 and node.inputs[3] != "":
		axes = values[node.inputs[3]].data
	else:
		for i in range(starts.size()):
			axes.append(i)
	var lo = []
	var hi = []
	for d in range(dims):
		lo.append(0)
		hi.append(shape[d])
	for k in range(axes.size()):
		var axis = int(axes[k])
		if axis < 0:
			axis += dims
		var size = shape[axis]
		var start = int(starts[k])
		var end = int(ends[k])
		if start < 0:
			start += size
		if end < 0:
			end += size
		lo[axis] = int(clamp(start, 0, size))
		hi[axis] = int(clamp(end, lo[axis], size))
	var out_shape = []
	var count = 1
	for d in range(dims):
		out_shape.append(hi[d] - lo[d])
		count *= hi[d] - lo[d]
	var strides = []
	strides.resize(dims)
	var stride = 1
	for d in range(dims - 1, -1, -1):
		strides[d] = stride
		stride *= shape[d]
	var y = []
	y.resize(count)
	var index = lo.duplicate()  # the source index of the next output element, row-major
	for i in range(count):
		var offset = 0
		for d in range(dims):
			offset += index[d] * strides[d]
		y[i] = a.data[offset]
		for d in range(dims - 1, -1, -1):
			index[d] += 1
			if index[d] < hi[d]:
				break
			index[d] = lo[d]
	return {"shape": out_shape, "data": y}


# -- The ONNX protobuf, as far as these models need it ------------------------------------------

func _read_graph(graph, nodes: Array, initializers: Dictionary, inputs: Array, outputs: Array) -> void:
	while graph.next():
		match graph.field:
			1:
				nodes.append(_read_node(graph.sub_reader()))
			5:
				var tensor = _read_tensor(graph.sub_reader())
				initializers[tensor.name] = {"shape": tensor.shape, "data": tensor.data}
			11:
				inputs.append(_read_value_info(graph.sub_reader()))
			12:
				outputs.append(_read_value_info(graph.sub_reader()).name)
			_:
				graph.skip()
	# Graph inputs that are initializers (older exporters list them) are not the observation.
	for i in range(inputs.size() - 1, -1, -1):
		if initializers.has(inputs[i].name):
			inputs.remove(i)


# A graph input's or output's {name, shape}: shape lists each dimension's size, -1 for
# a named one (batch).
func _read_value_info(reader) -> Dictionary:
	var info = {"name": "", "shape": []}
	while reader.next():
		if reader.field == 1:
			info.name = reader.string()
		elif reader.field == 2:  # TypeProto
			var type = reader.sub_reader()
			while type.next():
				if type.field != 1:  # tensor_type
					type.skip()
					continue
				var tensor = type.sub_reader()
				while tensor.next():
					if tensor.field != 2:  # shape
						tensor.skip()
						continue
					var shape = tensor.sub_reader()
					while shape.next():
						if shape.field != 1:
							shape.skip()
							continue
						var dim = shape.sub_reader()
						var size = -1
						while dim.next():
							if dim.field == 1:
								size = dim.varint()
							else:
								dim.skip()
						info.shape.append(size)
		else:
			reader.skip()
	return info


func _read_node(reader) -> Dictionary:
	var node = {"op": "", "inputs": [], "outputs": [], "attrs": {}}
	while reader.next():
		match reader.field:
			1:
				node.inputs.append(reader.string())
			2:
				node.outputs.append(reader.string())
			4:
				node.op = reader.string()
			5:
				var attribute = reader.sub_reader()
				var name = ""
				var value = 0.0
				while attribute.next():
					if attribute.field == 1:
						name = attribute.string()
					elif attribute.field == 2:
						value = attribute.float32()
					elif attribute.field == 3:
						value = attribute.varint()
					else:
						attribute.skip()
				node.attrs[name] = value
			_:
				reader.skip()
	return node


func _read_tensor(reader) -> Dictionary:
	var tensor = {"name": "", "shape": [], "data": []}
	var data_type = 1
	var raw = null
	var floats = []
	var ints = []
	while reader.next():
		match reader.field:
			1:
				if reader.wire_type == 2:  # packed dims
					var packed = reader.sub_reader()
					while packed.pos < packed.end:
						tensor.shape.append(packed.varint())
				else:
					tensor.shape.append(reader.varint())
			2:
				data_type = reader.varint()
			4:
				if reader.wire_type == 2:  # packed float_data
					var s = reader.span()
					floats += _floats(reader.data, s[0], s[1])
				else:
					floats.append(reader.float32())
			7:  # int64_data (Slice's starts/ends/axes)
				if reader.wire_type == 2:
					var packed = reader.sub_reader()
					while packed.pos < packed.end:
						ints.append(packed.varint())
				else:
					ints.append(reader.varint())
			8:
				tensor.name = reader.string()
			9:
				raw = reader.span()
			_:
				reader.skip()
	if data_type == 7:  # int64: only Slice's constant inputs
		tensor.data = _int64s(reader.data, raw[0], raw[1]) if raw != null else ints
		return tensor
	if data_type != 1:
		error_message = "tensor %s is not float32 (ONNX data type %d)" % [tensor.name, data_type]
	tensor.data = _floats(reader.data, raw[0], raw[1]) if raw != null else floats
	return tensor


static func _int64s(bytes: PoolByteArray, start: int, stop: int) -> Array:
	var result = []
	if stop <= start:
		return result
	var buffer = StreamPeerBuffer.new()
	buffer.data_array = bytes.subarray(start, stop - 1)
	for i in range((stop - start) / 8):
		result.append(buffer.get_64())
	return result


static func _floats(bytes: PoolByteArray, start: int, stop: int) -> Array:
	var result = []
	if stop <= start:
		return result
	var buffer = StreamPeerBuffer.new()
	buffer.data_array = bytes.subarray(start, stop - 1)
	for i in range((stop - start) / 4):
		result.append(buffer.get_float())
	return result
