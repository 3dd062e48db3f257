// CartPole-v1 for the example: the Unity package's CartPole sample physics
// (clients/unity/Samples~/CartPole/CartPolePhysics.cs, compiled in by build.sh), reward 1
// per step, truncated at 500 steps as gymnasium's TimeLimit (both may be true).

using RLlink.Samples.CartPole;

namespace RLlink.Example
{
    public sealed class CartPoleEnv : IExampleEnv
    {
        public const int MaxEpisodeSteps = CartPolePhysics.MaxEpisodeSteps;

        readonly CartPolePhysics physics;

        public CartPoleEnv(int seed) { physics = new CartPolePhysics(seed); }

        public int Steps { get { return physics.Steps; } }
        public string ObservationSpace { get { return "Box(shape [4])"; } }
        public string ActionSpace { get { return "Discrete(2)"; } }
        public float[] ActionMask { get { return null; } }

        public float[] Reset() { return physics.Reset(); }

        /// <summary>Reset to a given state (for tests that replay gymnasium).</summary>
        public float[] Reset(double[] state) { return physics.Reset(state); }

        public float[] Observation() { return physics.Observation(); }

        /// <summary>Push under the pole as it falls (the sample agent's Heuristic()): balances to the limit.</summary>
        public object Heuristic()
        {
            float[] state = physics.Observation(); // x, x', theta, theta'
            return state[2] + 0.5f * state[3] > 0 ? 1 : 0;
        }

        public float Step(AgentAction action, out bool terminated, out bool truncated)
        {
            terminated = physics.Step(action.Discrete);
            truncated = physics.Steps >= MaxEpisodeSteps;
            return 1f;
        }
    }
}
