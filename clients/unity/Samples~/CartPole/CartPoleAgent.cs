// The CartPole sample: an RLlinkAgent that balances a pole on a cart, trained by an
// RLlink gateway on its defaults (CartPole-v1's spaces, PPO). Add it to an empty
// GameObject in any scene and press Play (README.md, next to this file); it builds a
// cube cart and a pole to show the state, or moves the `cart` and `pole` you assign.
//
// The hooks are the whole game-side contract:
//   OnEpisodeBegin       reset the physics
//   CollectObservations  the 4 floats the gateway's observation space expects
//   OnActionReceived     push left (0) or right (1), reward 1, end the episode on a fall
//                        (EndEpisode: terminated) or after 500 steps (EpisodeInterrupted: truncated)
//   Heuristic            inference Heuristic: a scripted controller (push the way the pole
//                        falls), whose play the gateway can learn from (LOG_ACTION)
// Its declared spaces (observationSize 4, discreteActions [2]) are CartPole-v1's: a gateway
// started with others refuses it at connect, naming both.

using System.Collections.Generic;
using RLlink.Unity;
using UnityEngine;

namespace RLlink.Samples.CartPole
{
    public class CartPoleAgent : RLlinkAgent
    {
        [Header("CartPole")]
        [Tooltip("Shows the cart (moved along x); empty: a cube is made")]
        public Transform cart;
        [Tooltip("Shows the pole (moved and rotated about z, a sibling of the cart); empty: a thin cube is made")]
        public Transform pole;
        [Tooltip("Log the mean return every this many episodes (0: never)")]
        public int logEvery = 20;

        public CartPoleAgent()
        {
            observationSize = 4;
            discreteActions = new[] { 2 };
        }

        CartPolePhysics physics;
        float returnsSinceLog;
        int episodesSinceLog;

        /// <summary>The last completed episode's return (steps balanced).</summary>
        public float LastReturn { get; private set; }

        protected virtual void Awake()
        {
            physics = new CartPolePhysics(seed);
            if (cart == null)
            {
                var cube = GameObject.CreatePrimitive(PrimitiveType.Cube);
                cube.name = "Cart";
                cube.transform.SetParent(transform, false);
                cube.transform.localScale = new Vector3(0.5f, 0.3f, 0.3f);
                cart = cube.transform;
            }
            if (pole == null)
            {
                var stick = GameObject.CreatePrimitive(PrimitiveType.Cube);
                stick.name = "Pole";
                stick.transform.SetParent(transform, false);
                stick.transform.localScale = new Vector3(0.06f, 1f, 0.06f); // 1 m long: the physics' pole
                pole = stick.transform;
            }
        }

        protected override void OnEpisodeBegin()
        {
            physics.Reset();
            ShowState();
        }

        protected override void CollectObservations(List<float> obs)
        {
            obs.AddRange(physics.Observation());
        }

        protected override void OnActionReceived(AgentAction action)
        {
            bool fell = physics.Step(action.Discrete);
            AddReward(1f);
            ShowState();
            if (fell) Finish(true);
            else if (physics.Steps >= CartPolePhysics.MaxEpisodeSteps) Finish(false);
        }

        protected override object Heuristic()
        {
            float[] state = physics.Observation(); // x, x', theta, theta'
            return state[2] + 0.5f * state[3] > 0 ? 1 : 0; // push under the pole as it falls
        }

        void Finish(bool terminated)
        {
            LastReturn = EpisodeReturn;
            if (terminated) EndEpisode();
            else EpisodeInterrupted();
            returnsSinceLog += EpisodeReturn;
            if (logEvery > 0 && ++episodesSinceLog >= logEvery)
            {
                Debug.Log("CartPole: mean return " + (returnsSinceLog / episodesSinceLog).ToString("0.0") + " over the last " + episodesSinceLog + " episodes");
                returnsSinceLog = 0;
                episodesSinceLog = 0;
            }
        }

        void ShowState()
        {
            float x = (float)physics.X, theta = (float)physics.Theta;
            if (cart != null) cart.localPosition = new Vector3(x, 0f, 0f);
            if (pole != null)
            {
                // Hinged on the cart's top (0.15 m up), leaning right by theta.
                pole.localRotation = Quaternion.Euler(0f, 0f, -theta * Mathf.Rad2Deg);
                pole.localPosition = new Vector3(x + 0.5f * Mathf.Sin(theta), 0.15f + 0.5f * Mathf.Cos(theta), 0f);
            }
        }
    }
}
