// CartPole-v1 exactly as gymnasium steps it: observation [x, x_dot, theta, theta_dot],
// actions 0 (push left) and 1 (push right), terminated once |theta| > 12 degrees or
// |x| > 2.4; Euler integration, tau 0.02 s (Unity's default Fixed Timestep). Plain C#,
// no Unity types: CartPoleAgent drives it, and the repository's console example
// (clients/csharp/example/) trains on this same file in CI.

using System;

namespace RLlink.Samples.CartPole
{
    public sealed class CartPolePhysics
    {
        const double Gravity = 9.8, MassCart = 1.0, MassPole = 0.1, TotalMass = MassCart + MassPole;
        const double Length = 0.5, PoleMassLength = MassPole * Length, ForceMag = 10.0;
        const double ThetaThreshold = 12 * 2 * Math.PI / 360, XThreshold = 2.4;
        /// <summary>Seconds per step.</summary>
        public const double Tau = 0.02;
        /// <summary>gymnasium's TimeLimit for CartPole-v1: truncated after this many steps.</summary>
        public const int MaxEpisodeSteps = 500;

        readonly Random random;
        double x, xDot, theta, thetaDot;

        /// <summary>Steps since the last Reset.</summary>
        public int Steps { get; private set; }
        /// <summary>Cart position (m) and pole angle (radians, 0 upright, positive leaning right).</summary>
        public double X { get { return x; } }
        public double Theta { get { return theta; } }

        public CartPolePhysics(int seed) { random = new Random(seed); }

        /// <summary>A new episode: each state value uniform in [-0.05, 0.05].</summary>
        public float[] Reset()
        {
            x = Uniform(); xDot = Uniform(); theta = Uniform(); thetaDot = Uniform();
            Steps = 0;
            return Observation();
        }

        /// <summary>Reset to a given state [x, x_dot, theta, theta_dot] (to replay gymnasium).</summary>
        public float[] Reset(double[] state)
        {
            x = state[0]; xDot = state[1]; theta = state[2]; thetaDot = state[3];
            Steps = 0;
            return Observation();
        }

        double Uniform() { return random.NextDouble() * 0.1 - 0.05; }

        public float[] Observation() { return new[] { (float)x, (float)xDot, (float)theta, (float)thetaDot }; }

        /// <summary>One step with action 0 or 1; returns whether the episode terminated (the
        /// reward is 1 per step, terminal or not).</summary>
        public bool Step(int action)
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
            return x < -XThreshold || x > XThreshold || theta < -ThetaThreshold || theta > ThetaThreshold;
        }
    }
}
