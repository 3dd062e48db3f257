// Small tasks for the kit's richer action spaces, as clients/python/rllink_clients/choice_envs.py has them
// for Python: a MultiDiscrete action, and action masks. A forbidden or malformed action
// throws InvalidActionException, which ends the example (exit 4): a run that finishes
// never took one.
//
// - two-targets: MultiDiscrete([3, 3]); two targets of 3, shown one-hot, new each step;
//   reward 1 per sub-action on its target; truncated after 8 steps. Random 5.33, best 16.
// - masked-targets: the same, and at each step one wrong choice of each sub-action is
//   forbidden (the action mask, 6 values). Random allowed 8, best 16.
// - masked-pick: Discrete(6); six values in [0, 1], three items forbidden at random each
//   step; observation: the values, then the mask; reward: the picked value; truncated
//   after 10 steps. Random allowed 5.0, the best allowed 7.5.

using System;

namespace RLlink.Example
{
    /// <summary>An episode task the example trains on.</summary>
    public interface IExampleEnv
    {
        /// <summary>The gateway's spaces this env needs, as SET_CONFIG prints them.</summary>
        string ObservationSpace { get; }
        string ActionSpace { get; }
        float[] Reset();
        float[] Observation();
        /// <summary>The actions allowed now, one value per logit (1 allowed, 0 forbidden); null: all.</summary>
        float[] ActionMask { get; }
        /// <summary>One step; returns the reward.</summary>
        float Step(AgentAction action, out bool terminated, out bool truncated);
        int Steps { get; }
        /// <summary>A scripted controller's action now (an int or an int[], one the mask allows):
        /// what --record-demos plays.</summary>
        object Heuristic();
    }

    /// <summary>The env was given an action it does not take (forbidden by its mask, or out of range).</summary>
    public sealed class InvalidActionException : Exception
    {
        public InvalidActionException(string message) : base(message) { }
    }

    public sealed class TwoTargetsEnv : IExampleEnv
    {
        const int Length = 8;
        static readonly int[] Nvec = { 3, 3 };
        readonly Random random;
        readonly bool masked;
        readonly int[] targets = new int[2];
        float[] mask;

        public TwoTargetsEnv(int seed, bool masked)
        {
            random = new Random(seed);
            this.masked = masked;
        }

        public string ObservationSpace { get { return "Box(shape [6])"; } }
        public string ActionSpace { get { return "MultiDiscrete([3, 3])"; } }
        public int Steps { get; private set; }
        public float[] ActionMask { get { return masked ? (float[])mask.Clone() : null; } }

        public float[] Reset()
        {
            Steps = 0;
            Draw();
            return Observation();
        }

        /// <summary>Both targets: the best action, never a forbidden one (only wrong ones are).</summary>
        public object Heuristic() { return new[] { targets[0], targets[1] }; }

        public float[] Observation()
        {
            var obs = new float[6];
            obs[targets[0]] = 1;
            obs[3 + targets[1]] = 1;
            return obs;
        }

        public float Step(AgentAction action, out bool terminated, out bool truncated)
        {
            int[] a = action.MultiDiscrete;
            if (a.Length != 2) throw new InvalidActionException("two-targets takes 2 sub-actions, got " + action);
            float reward = 0;
            for (int i = 0, start = 0; i < 2; start += Nvec[i], i++)
            {
                if (a[i] < 0 || a[i] >= Nvec[i]) throw new InvalidActionException("sub-action " + i + " of " + action + " is outside 0.." + (Nvec[i] - 1));
                if (masked && mask[start + a[i]] == 0)
                    throw new InvalidActionException("action " + action + " is forbidden by the mask " + Json.Serialize(mask));
                if (a[i] == targets[i]) reward += 1;
            }
            Steps++;
            Draw();
            terminated = false;
            truncated = Steps >= Length;
            return reward;
        }

        void Draw()
        {
            mask = new float[6];
            for (int i = 0, start = 0; i < 2; start += Nvec[i], i++)
            {
                targets[i] = random.Next(Nvec[i]);
                int forbidden = (targets[i] + 1 + random.Next(Nvec[i] - 1)) % Nvec[i]; // a wrong one
                for (int j = 0; j < Nvec[i]; j++) mask[start + j] = j == forbidden ? 0 : 1;
            }
        }
    }

    public sealed class MaskedPickEnv : IExampleEnv
    {
        const int Length = 10, Items = 6, Forbidden = 3;
        readonly Random random;
        readonly float[] values = new float[Items];
        readonly float[] mask = new float[Items];

        public MaskedPickEnv(int seed) { random = new Random(seed); }

        public string ObservationSpace { get { return "Box(shape [12])"; } }
        public string ActionSpace { get { return "Discrete(6)"; } }
        public int Steps { get; private set; }
        public float[] ActionMask { get { return (float[])mask.Clone(); } }

        public float[] Reset()
        {
            Steps = 0;
            Draw();
            return Observation();
        }

        /// <summary>The most valuable allowed item: the best allowed return.</summary>
        public object Heuristic()
        {
            int best = -1;
            for (int i = 0; i < Items; i++)
                if (mask[i] == 1 && (best < 0 || values[i] > values[best])) best = i;
            return best;
        }

        public float[] Observation()
        {
            var obs = new float[2 * Items];
            Array.Copy(values, obs, Items);
            Array.Copy(mask, 0, obs, Items, Items);
            return obs;
        }

        public float Step(AgentAction action, out bool terminated, out bool truncated)
        {
            int a = action.Discrete;
            if (a < 0 || a >= Items) throw new InvalidActionException("masked-pick takes 0.." + (Items - 1) + ", got " + a);
            if (mask[a] == 0) throw new InvalidActionException("action " + a + " is forbidden by the mask " + Json.Serialize(mask));
            float reward = values[a];
            Steps++;
            Draw();
            terminated = false;
            truncated = Steps >= Length;
            return reward;
        }

        void Draw()
        {
            for (int i = 0; i < Items; i++)
            {
                values[i] = (float)random.NextDouble();
                mask[i] = 1;
            }
            for (int left = Forbidden; left > 0;)
            {
                int i = random.Next(Items);
                if (mask[i] == 0) continue;
                mask[i] = 0;
                left--;
            }
        }
    }
}
