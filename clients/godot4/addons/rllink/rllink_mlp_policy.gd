# Local inference without an ONNX runtime: reads the gateway's ONNX model (protobuf)
# and runs it in GDScript. The gateway's policies are small MLPs: Gemm and Tanh for
# PPO (Flatten first for multi-dimensional observations), plus Relu, Mul, Add and Concat
# for SAC's actor, and Sub, Mul and Add for an action mask (a masked module's model
# takes a second input, action_mask [batch, k], and outputs
# logits + (action_mask - 1) * 1e8); this also runs MatMul, Sigmoid and Identity. A
# recurrent module's model (an LSTM, RLLINK.md "Recurrent policies") takes a further
# input, state_in [batch, state_size], and gives a further output, state_out, the state
# after the step: one LSTM step written out in Slice (opset 13: starts, ends and axes as
# int64 initializers), Gemm, Add, Sigmoid, Tanh, Mul and Concat, all run here; step()
# feeds the state and returns state_out. A model with any other operator is refused at
# load() with its name: the CNN (Conv) of image observations, which is too slow for
# GDScript, needs thin mode. Values are
# computed in double precision from the float32 weights (elementwise Add, Sub and Mul
# round to float32, as onnxruntime does), so the outputs match onnxruntime's to ~1e-6.
#
# Cost: one multiply-add per weight per observation, in GDScript: about 1 ms for the
# default 64x64 policy. Fine for a few agents; for many agents or big networks use thin
# mode (the gateway batches every agent's observations into one onnxruntime pass).
extends RefCounted

const Protobuf = preload("res://addons/rllink/rllink_protobuf.gd")

# A gSDE actor's exploring SET_STATE model also outputs its action_dist_inputs without this
# version's exploration noise: the most likely action (explore off) is played from it.
const NOISE_FREE_OUTPUT = "action_dist_inputs_noise_free"
# A recurrent model's state input and output (the gateway's app/spaces/onnx_names.py).
const STATE_INPUT = "state_in"
const STATE_OUTPUT = "state_out"
const SUPPORTED = [
	"Gemm",
	"Tanh",
	"Relu",
	"Sigmoid",
	"Flatten",
	"MatMul",
	"Add",
	"Sub",
	"Mul",
	"Concat",
	"Slice",
	"Identity"
]
# An image's or a grid's CNN (app/training/onnx_export.py).
const IMAGE_OPS = ["Conv", "Reshape"]
const FLOAT32 = 1  # ONNX TensorProto data types
const INT64 = 7
const LIST_TYPES = [
	TYPE_ARRAY,
	TYPE_PACKED_FLOAT32_ARRAY,
	TYPE_PACKED_FLOAT64_ARRAY,
	TYPE_PACKED_INT32_ARRAY,
	TYPE_PACKED_INT64_ARRAY,
]

var metadata = {}  # the model's metadata_props (weights_seq_no, spaces, output_layout, ...)
var input_name = ""
var output_name = ""
var noise_free_output = ""  # a gSDE exploring model's second output, "" if it has none
var mask_input_name = ""  # a masked model's second input (action_mask), "" for an unmasked one
var mask_width = 0  # its values per row: one per logit
var state_size = 0  # a recurrent model's state_in / state_out width; 0: feed-forward
var observation_shape = []
var error_message = ""  # why load() failed

var _nodes = []  # [{op, inputs, outputs, attrs}], in graph order (topological)
var _initializers = {}  # name -> {shape, data}


# Why this runtime cannot run these nodes ("" if it can). Image models first: their
# int64 shape tensors are not the point.
static func _unsupported(nodes: Array) -> String:
	for node in nodes:
		if node.op in IMAGE_OPS:
			return (
				"the model has Conv nodes (a CNN, for image or grid observations), which this GDScript"
				+ " runtime does not run: use thin mode (the gateway runs the model)"
			)
	for node in nodes:
		if not node.op in SUPPORTED:
			return (
				"this runtime runs %s models; this one has a %s node"
				% ["/".join(PackedStringArray(SUPPORTED)), node.op]
			)
	return ""


# Load a model (plain ONNX bytes, see RLlinkClient.decode_onnx). input/output names:
# SET_CONFIG's onnx_input_name and onnx_output_names[0] ("" for the graph's own);
# mask_input: its onnx_action_mask_input_name ("": the graph's second input, if any).
# Returns false and sets error_message if the model cannot be run.
func load_model(
	model: PackedByteArray, input := "", output := "", obs_shape := [], mask_input := ""
) -> bool:
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
	elif nodes.is_empty():
		error_message = "the ONNX model has no graph nodes"
	elif error_message == "":  # else set while reading (a tensor neither float32 nor int64)
		error_message = _unsupported(nodes)
	if error_message != "":
		return false
	var names: Array = []
	for info in graph_inputs:
		names.append(info.name)
	input_name = input if input != "" else (names[0] if not names.is_empty() else "obs")
	mask_input_name = mask_input
	if mask_input_name == "":
		for name in names:
			if name != input_name and name != STATE_INPUT:
				mask_input_name = name  # besides state_in, at most one more input: the mask
				break
	error_message = _read_state_size(graph_inputs, names, graph_outputs, meta)
	if error_message == "":
		error_message = _read_mask_width(graph_inputs, names)
	if error_message == "":
		error_message = _check_inputs(names)
	if error_message == "":
		error_message = _check_slices(nodes, initializers)
	if error_message != "":
		return false
	_nodes = nodes
	_initializers = initializers
	metadata = meta
	output_name = output if output != "" else graph_outputs[0]
	noise_free_output = NOISE_FREE_OUTPUT if NOISE_FREE_OUTPUT in graph_outputs else ""
	observation_shape = obs_shape
	return true


# Sets state_size from a recurrent model's state_in [batch, state_size] (0 without one);
# why the model's state cannot be carried ("" if fine).
func _read_state_size(
	graph_inputs: Array, names: Array, graph_outputs: Array, meta: Dictionary
) -> String:
	state_size = 0
	if not STATE_INPUT in names:
		if STATE_OUTPUT in graph_outputs:
			return "the model has an output %s but no input %s" % [STATE_OUTPUT, STATE_INPUT]
		return ""
	var dims = graph_inputs[names.find(STATE_INPUT)].shape
	var size = int(dims[1]) if dims.size() == 2 and dims[1] > 0 else 0
	if size == 0:
		return (
			"the model's input %s is not [batch, state_size] with a fixed state_size"
			% STATE_INPUT
		)
	if not STATE_OUTPUT in graph_outputs:
		return (
			"the model has a recurrent state input %s but no output %s to carry it"
			% [STATE_INPUT, STATE_OUTPUT]
		)
	if meta.has("state_size") and int(str(meta.state_size)) != size:
		return (
			"the model's metadata says state_size %s but its input %s holds %d"
			% [str(meta.state_size), STATE_INPUT, size]
		)
	state_size = size
	return ""


# Why an input of the graph would go unfed ("" if each is the observation, the mask or
# the state).
func _check_inputs(names: Array) -> String:
	for name in names:
		if name != input_name and name != mask_input_name and name != STATE_INPUT:
			var fed := PackedStringArray([input_name])
			if mask_input_name != "":
				fed.append(mask_input_name)
			fed.append(STATE_INPUT)
			return (
				"the model has an input %s this runtime cannot feed (it feeds %s)"
				% [name, ", ".join(fed)]
			)
	return ""


# Why a Slice node cannot run here ("" if each can): starts, ends and (optional) axes
# must be int64 initializers (opset 10+), steps absent or all 1.
static func _check_slices(nodes: Array, initializers: Dictionary) -> String:
	for node in nodes:
		if node.op != "Slice":
			continue
		if node.inputs.size() < 3:
			return "a Slice node without starts/ends inputs (opset < 10): this runtime runs opset 10+"
		for i in range(1, node.inputs.size()):
			var name: String = node.inputs[i]
			if name == "":
				continue
			if not initializers.has(name) or not initializers[name].get("ints", false):
				return (
					"a Slice node's %s is not a constant int64 tensor: this runtime cannot run it"
					% name
				)
			if i == 4:
				for stride in initializers[name].data:
					if stride != 1:
						return (
							"a Slice node has a step of %d: this runtime slices with step 1"
							% stride
						)
	return ""


# Sets mask_width from the mask input's [batch, k]; why it cannot ("" if fine).
func _read_mask_width(graph_inputs: Array, names: Array) -> String:
	mask_width = 0
	if mask_input_name == "":
		return ""
	if not mask_input_name in names:
		return "the model has no input named %s (the action mask)" % mask_input_name
	var dims = graph_inputs[names.find(mask_input_name)].shape
	mask_width = int(dims[1]) if dims.size() == 2 and dims[1] > 0 else 0
	if mask_width == 0:
		return "the model's input %s is not [batch, k] with a fixed k" % mask_input_name
	return ""


func is_loaded() -> bool:
	return not _nodes.is_empty()


func is_masked() -> bool:
	return mask_input_name != ""


func is_recurrent() -> bool:
	return state_size > 0


# A recurrent model's state at an episode's start: state_size zeros.
func zero_state() -> Array:
	var zeros: Array = []
	zeros.resize(state_size)
	zeros.fill(0.0)
	return zeros


# The model's first output for one observation (numbers, any nesting, flattened in
# row-major order): an Array of floats (logits, or means then log stds). mask: a masked
# model's action mask, one 0/1 per logit (empty: all allowed); the forbidden logits come
# out about -1e8, so their probability is 0. noise_free: a gSDE exploring model's
# noise-free output instead (the most likely action's), where it has one.
func run(observation, mask := [], noise_free := false) -> Array:
	var outputs := run_batch([observation], [mask], noise_free)
	return outputs[0] if not outputs.is_empty() else []


# The outputs for several observations at once: one Array of floats per observation.
# masks: one mask per observation (or none: all allowed), for a masked model. A recurrent
# model is fed zeros as its state here (an episode's first step): use step_batch().
func run_batch(observations: Array, masks := [], noise_free := false) -> Array:
	return step_batch(observations, [], masks, noise_free).get("outputs", [])


# One step of a recurrent model (or of any: state is ignored by a feed-forward one):
# {"output": the first output as run() gives it, "state": state_out, the state to feed
# with the next observation ([] for a feed-forward model)}; state: the state fed with
# this observation (state_size floats; empty: zeros, an episode's start). {} on an error
# (pushed).
func step(observation, state := [], mask := [], noise_free := false) -> Dictionary:
	var result := step_batch([observation], [state], [mask], noise_free)
	if result.is_empty():
		return {}
	return {"output": result.outputs[0], "state": result.states[0]}


# step() for several observations at once, one state and one mask per observation:
# {"outputs": [...], "states": [...]} ({} on an error, pushed).
func step_batch(observations: Array, states := [], masks := [], noise_free := false) -> Dictionary:
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
			if mask.is_empty():
				for i in range(mask_width):
					mask_data.append(1.0)
			elif mask.size() != mask_width:
				push_error(
					(
						"RLlink: an action mask of %d values for a model that takes %d"
						% [mask.size(), mask_width]
					)
				)
				return {}
			else:
				for m in mask:
					mask_data.append(float(m))
		values[mask_input_name] = {"shape": [rows, mask_width], "data": mask_data}
	if state_size > 0:
		var state_data = []
		for r in range(rows):
			var state = states[r] if r < states.size() else []
			if state.is_empty():
				state = zero_state()
			elif state.size() != state_size:
				push_error(
					(
						"RLlink: a recurrent state of %d values for a model whose state_size is %d"
						% [state.size(), state_size]
					)
				)
				return {}
			for v in state:
				state_data.append(float(v))
		values[STATE_INPUT] = {"shape": [rows, state_size], "data": state_data}
	for node in _nodes:
		values[node.outputs[0]] = _evaluate(node, values)
	var name = noise_free_output if noise_free and noise_free_output != "" else output_name
	var output = values.get(name)
	if output == null:
		push_error("RLlink: the model computed no output named " + name)
		return {}
	var result = {"outputs": _rows(output, rows), "states": []}
	if state_size > 0:
		var state_out = values.get(STATE_OUTPUT)
		if state_out == null or state_out.data.size() != rows * state_size:
			push_error("RLlink: the model computed no %s of %d values" % [STATE_OUTPUT, state_size])
			return {}
		result.states = _rows(state_out, rows)
	else:
		for r in range(rows):
			result.states.append([])
	return result


static func _rows(tensor: Dictionary, rows: int) -> Array:
	var columns = tensor.data.size() / max(rows, 1)
	var result = []
	for r in range(rows):
		result.append(Array(tensor.data.slice(r * columns, (r + 1) * columns)))
	return result


static func _flatten_into(value, out: Array) -> void:
	if typeof(value) in LIST_TYPES:
		for item in value:
			_flatten_into(item, out)
	else:
		out.append(float(value))


# -- Operators --------------------------------------------------------------------------------


func _evaluate(node: Dictionary, values: Dictionary) -> Dictionary:
	var a = values.get(node.inputs[0]) if node.inputs.size() > 0 else null
	var b = values.get(node.inputs[1]) if node.inputs.size() > 1 and node.inputs[1] != "" else null
	var result = a  # Identity
	match node.op:
		"Gemm":
			var c = (
				values.get(node.inputs[2])
				if node.inputs.size() > 2 and node.inputs[2] != ""
				else null
			)
			result = _gemm(
				a,
				b,
				c,
				node.attrs.get("alpha", 1.0),
				node.attrs.get("beta", 1.0),
				node.attrs.get("transA", 0) != 0,
				node.attrs.get("transB", 0) != 0
			)
		"MatMul":
			result = _gemm(a, b, null, 1.0, 0.0, false, false)
		"Tanh", "Relu", "Sigmoid":
			result = _activation(a, node.op)
		"Flatten":
			result = _flatten(a, int(node.attrs.get("axis", 1)))
		"Add", "Sub", "Mul":
			result = _broadcast(a, b, node.op)
		"Concat":
			result = _concat(node, values)
		"Slice":
			result = _slice(node, values)
		"Identity":
			pass
		_:
			push_error("RLlink: unsupported operator " + node.op)
	return result


static func _activation(a: Dictionary, op: String) -> Dictionary:
	var y: Array = []
	for x in a.data:
		match op:
			"Tanh":
				y.append(tanh(x))
			"Relu":
				y.append(x if x > 0.0 else 0.0)
			_:
				y.append(1.0 / (1.0 + exp(-x)))
	return {"shape": a.shape, "data": y}


static func _flatten(a: Dictionary, axis: int) -> Dictionary:
	if axis < 0:
		axis += a.shape.size()
	var outer := 1
	var inner := 1
	for i in range(a.shape.size()):
		if i < axis:
			outer *= a.shape[i]
		else:
			inner *= a.shape[i]
	return {"shape": [outer, inner], "data": a.data}


# Y = alpha * A' B' + beta * C, A' = A or its transpose (2-D), C broadcast over rows.
static func _gemm(
	a: Dictionary, b: Dictionary, c, alpha: float, beta: float, trans_a: bool, trans_b: bool
) -> Dictionary:
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
	return {"shape": big.shape, "data": Array(PackedFloat32Array(y))}  # float32 values


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
		return {"shape": [total_rows] + Array(parts[0].shape).slice(1), "data": y}
	var width = 0
	for part in parts:
		width += part.data.size() / rows
	for r in range(rows):
		for part in parts:
			var cols = part.data.size() / rows
			for i in range(cols):
				y.append(part.data[r * cols + i])
	return {"shape": [rows, width], "data": y}


# Slice (opset 10+) of a 2-D tensor: starts, ends and axes (default [0, 1]) from int64
# initializers, steps 1 (load() checks both); negative indices count from the end, and
# out-of-range ones are clamped, as ONNX says.
static func _slice(node: Dictionary, values: Dictionary) -> Dictionary:
	var a: Dictionary = values[node.inputs[0]]
	var starts: Array = values[node.inputs[1]].data
	var ends: Array = values[node.inputs[2]].data
	var axes: Array = [0, 1]
	if node.inputs.size() > 3 and node.inputs[3] != "":
		axes = values[node.inputs[3]].data
	if a.shape.size() != 2:
		push_error("RLlink: Slice of a %d-D tensor (this runtime slices 2-D ones)" % a.shape.size())
		return a
	var dims: Array = [int(a.shape[0]), int(a.data.size() / max(int(a.shape[0]), 1))]
	var lo: Array = [0, 0]
	var hi: Array = dims.duplicate()
	for i in range(starts.size()):
		var axis := int(axes[i])
		if axis < 0:
			axis += 2
		var dim: int = dims[axis]
		var start := int(starts[i])
		var stop := int(ends[i])
		start = clampi(start + dim if start < 0 else start, 0, dim)
		stop = clampi(stop + dim if stop < 0 else stop, 0, dim)
		lo[axis] = start
		hi[axis] = maxi(stop, start)
	var y = []
	for r in range(lo[0], hi[0]):
		var offset: int = r * dims[1]
		y += Array(a.data.slice(offset + lo[1], offset + hi[1]))
	return {"shape": [hi[0] - lo[0], hi[1] - lo[1]], "data": y}


# -- The ONNX protobuf, as far as these models need it ------------------------------------------


func _read_graph(
	graph, nodes: Array, initializers: Dictionary, inputs: Array, outputs: Array
) -> void:
	while graph.next():
		match graph.field:
			1:
				nodes.append(_read_node(graph.sub_reader()))
			5:
				var tensor = _read_tensor(graph.sub_reader())
				initializers[tensor.name] = {
					"shape": tensor.shape, "data": tensor.data, "ints": tensor.ints
				}
			11:
				inputs.append(_read_value_info(graph.sub_reader()))
			12:
				outputs.append(_read_value_info(graph.sub_reader()).name)
			_:
				graph.skip()
	# Graph inputs that are initializers (older exporters list them) are not the observation.
	for i in range(inputs.size() - 1, -1, -1):
		if initializers.has(inputs[i].name):
			inputs.remove_at(i)


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


# A float32 tensor, or an int64 one (Slice's starts, ends and axes; "ints": true).
func _read_tensor(reader) -> Dictionary:
	var tensor = {"name": "", "shape": [], "data": [], "ints": false}
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
			7:  # int64_data
				if reader.wire_type == 2:  # packed
					var packed = reader.sub_reader()
					while packed.pos < packed.end and packed.error_message == "":
						ints.append(packed.varint())
				else:
					ints.append(reader.varint())
			8:
				tensor.name = reader.string()
			9:
				var s = reader.span()
				raw = reader.data.slice(s[0], s[1])
			_:
				reader.skip()
	if data_type == INT64:
		tensor.ints = true
		tensor.data = _int64s(raw) if raw != null else ints
	elif data_type == FLOAT32:
		tensor.data = _floats(raw, 0, raw.size()) if raw != null else floats
	else:
		error_message = (
			"tensor %s is neither float32 nor int64 (ONNX data type %d)" % [tensor.name, data_type]
		)
	return tensor


static func _int64s(bytes: PackedByteArray) -> Array:
	var values = []
	for offset in range(0, bytes.size() - 7, 8):
		values.append(bytes.decode_s64(offset))
	return values


static func _floats(bytes: PackedByteArray, start: int, stop: int) -> Array:
	if stop <= start:
		return []
	return Array(bytes.slice(start, stop).to_float32_array())
