// CartPole-v1 exactly as gymnasium steps it: observation [x, x_dot, theta, theta_dot],
// actions 0 (push left) and 1 (push right), reward 1 per step, terminated once
// |theta| > 12 degrees or |x| > 2.4, truncated at 500 steps. Euler integration, tau 0.02.

using System;

namespace RLlink.Example
{
    public sealed class CartPoleEnv : IExampleEnv
    {
        const double Gravity = 9.8, MassCart = 1.0, MassPole = 0.1, TotalMass = MassCart + MassPole;
        const double Length = 0.5, PoleMassLength = MassPole * Length, ForceMag = 10.0, Tau = 0.02;
        const double ThetaThreshold = 12 * 2 * Math.PI / 360, XThreshold = 2.4;
        public const int MaxEpisodeSteps = 500;

        readonly Random random;
        double x, xDot, theta, thetaDot;
        public int Steps { get; private set; }

        public CartPoleEnv(int seed) { random = new Random(seed); }

        public string ObservationSpace { get { return "Box(shape [4])"; } }
        public string ActionSpace { get { return "Discrete(2)"; } }
        public float[] ActionMask { get { return null; } }

        public float[] Reset()
        {
            x = Uniform(); xDot = Uniform(); theta = Uniform(); thetaDot = Uniform();
            Steps = 0;
            return Observation();
        }

        /// <summary>Reset to a given state (for tests that replay gymnasium).</summary>
        public float[] Reset(double[] state)
        {
            x = state[0]; xDot = state[1]; theta = state[2]; thetaDot = state[3];
            Steps = 0;
            return Observation();
        }

        double Uniform() { return random.NextDouble() * 0.1 - 0.05; }

        public float[] Observation() { return new[] { (float)x, (float)xDot, (float)theta, (float)thetaDot }; }

        public float Step(AgentAction action, out bool terminated, out bool truncated)
        {
            return Step(action.Discrete, out terminated, out truncated);
        }

        /// <summary>One step; returns the reward (1).</summary>
        public float Step(int action, out bool terminated, out bool truncated)
        {
            if (action != 0 && action != 1) throw new ArgumentOutOfRangeException("action", action, "CartPole takes 0 or 1");
            double force = action == 1 ? ForceMag : -ForceMag;
            double cos = Math.Cos(theta), sin = Math.Sin(theta);
            double temp = (force + PoleMassLength * thetaDot * thetaDot * sin) / TotalMass;
            double thetaAcc = (Gravity * sin - cos * temp) / (Length * (4.0 / 3.0 - MassPole * cos * cos / TotalMass));
            double xAcc = temp - PoleMassLength * thetaAcc * cos / TotalMass;
            x += Tau * xDot;
            xDot += Tau * xAcc;
            theta += Tau * thetaDot;
            thetaDot += Tau * thetaAcc;
            Steps++;
            terminated = x < -XThreshold || x > XThreshold || theta < -ThetaThreshold || theta > ThetaThreshold;
            truncated = Steps >= MaxEpisodeSteps; // as gymnasium's TimeLimit: both may be true
            return 1f;
        }
    }
}
