# RLlinkRaycastSensor2D: N rays in a fan from this node, for an agent's observation:
# how far away the nearest obstacle is in each direction. Add it as a child of the body
# it senses for (the body itself is never hit), aim it with its own rotation (the fan's
# middle ray points along +X, a Node2D's forward), then append its values to get_obs():
#
#   @onready var eyes: RLlinkRaycastSensor2D = $Eyes
#   func get_obs() -> Array:
#       return [velocity.x / 100.0, velocity.y / 100.0] + eyes.get_observation()
#
# get_observation() returns ray_count floats, the rays in order of angle: the distance to
# the first hit divided by max_distance, so 0.0 touches and 1.0 means nothing within
# max_distance. It queries the physics space directly (no RayCast2D nodes to keep in
# sync), so call it from the physics step, as the agent's get_obs() is.
class_name RLlinkRaycastSensor2D
extends Node2D

@export_range(1, 256) var ray_count := 8
@export_range(0.0, 360.0) var fan_degrees := 120.0  # from the first ray to the last
@export var max_distance := 500.0  # pixels
@export_flags_2d_physics var collision_mask := 1
@export var collide_with_bodies := true
@export var collide_with_areas := false
@export var exclude_parent := true  # never hit the body the sensor is on


# One value per ray: hit distance / max_distance, 1.0 when nothing is hit.
func get_observation() -> Array:
	var space := get_world_2d().direct_space_state
	var origin := global_position
	var exclude: Array[RID] = []
	var parent = get_parent()
	if exclude_parent and parent is CollisionObject2D:
		exclude.append(parent.get_rid())
	var values: Array = []
	for i in range(ray_count):
		var target := origin + global_transform.basis_xform(ray_direction(i) * max_distance)
		var query := PhysicsRayQueryParameters2D.create(origin, target, collision_mask, exclude)
		query.collide_with_bodies = collide_with_bodies
		query.collide_with_areas = collide_with_areas
		var hit := space.intersect_ray(query)
		if hit.is_empty():
			values.append(1.0)
		else:
			values.append(clampf(origin.distance_to(hit.position) / max_distance, 0.0, 1.0))
	return values


# Ray i's direction in this node's space (unit length), centred on +X; a single ray
# points straight ahead.
func ray_direction(i: int) -> Vector2:
	var angle := 0.0
	if ray_count > 1:
		angle = deg_to_rad(-fan_degrees / 2.0 + fan_degrees * i / (ray_count - 1))
	return Vector2.RIGHT.rotated(angle)
