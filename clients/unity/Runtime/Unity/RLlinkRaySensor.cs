// A ray-cast sensor, as ML-Agents' RayPerceptionSensor: a fan of rays from the object's
// position, in the plane its up axis is normal to, centred on its forward axis. Each ray
// gives the distance to the first collider it hits, divided by rayLength (1: nothing
// within reach), so an agent sees walls and obstacles without hand-written geometry:
//
//   public RLlinkRaySensor eyes;                     // on a child object, facing forward
//   protected override void CollectObservations(List<float> obs)
//   {
//       eyes.AddObservations(obs);                   // rayCount floats in [0, 1]
//       obs.Add(speed);
//   }
//
// observationSize (the agent's declared space) counts the rays too. CI compiles it
// against stand-ins of Unity's physics with planes for walls (clients/csharp/stubs/);
// it has not been run in Unity by CI.

using System.Collections.Generic;
using UnityEngine;

namespace RLlink.Unity
{
    public class RLlinkRaySensor : MonoBehaviour
    {
        [Tooltip("Rays in the fan (its observations: one float each)")]
        public int rayCount = 5;
        [Tooltip("Degrees from the first ray to the last, centred on forward (0: all forward)")]
        public float fieldOfView = 90f;
        [Tooltip("How far a ray sees, in world units; farther hits read as 1")]
        public float rayLength = 20f;
        [Tooltip("The layers the rays hit")]
        public LayerMask layers = ~0;

        /// <summary>Degrees of ray <paramref name="index"/> about the up axis, from -fieldOfView/2
        /// (the first) to +fieldOfView/2 (the last), evenly; 0 for a single ray.</summary>
        public float RayAngle(int index)
        {
            return rayCount <= 1 ? 0f : -fieldOfView / 2f + fieldOfView * index / (rayCount - 1);
        }

        /// <summary>Cast the rays now and add one value per ray: the distance to the first hit
        /// over rayLength, or 1 when nothing is within reach.</summary>
        public void AddObservations(List<float> obs)
        {
            Vector3 origin = transform.position, forward = transform.forward, up = transform.up;
            for (int i = 0; i < rayCount; i++)
            {
                Vector3 direction = Quaternion.AngleAxis(RayAngle(i), up) * forward;
                RaycastHit hit;
                bool hitSomething = Physics.Raycast(origin, direction, out hit, rayLength, layers);
                obs.Add(hitSomething ? Mathf.Clamp01(hit.distance / rayLength) : 1f);
            }
        }
    }
}
