// Demonstrations: the episodes a game plays itself (inference Heuristic: a human at the
// keyboard, a script), written as RLlink episode chunks, one JSON object a line: the file
// the gateway's `demos` setting pre-trains a policy on by behavioural cloning
// (docs/training.md, "Demonstrations"; the gateway's loader is app/training/demos.py).
// No gateway is needed to record.
//
// A line holds one whole episode: obs (T+1: the last is the observation the episode ended
// on), actions (T), rewards (T: what each action earned), is_terminated, is_truncated,
// action_mask (T rows, only when the game masked some step; a step it did not mask is
// written as all allowed), agent_id and module_id when set, and a fresh episode_id. Each
// line is written and flushed when its episode ends, so a game that quits (or crashes)
// loses at most the episode it was playing. The file is appended to (a header line first
// when it is new or empty): several sessions of play add up; delete it to start over.
//
// Plain C# 6 (no Unity types): Unity and Debian's mcs compile it. WebGL players have no
// file system to keep it in: record in the editor or a desktop player.

using System;
using System.Collections.Generic;
using System.IO;
using System.Text;

namespace RLlink
{
    public sealed class DemoRecorder : IDisposable
    {
        /// <summary>The first line of a new file (the gateway's loader skips lines starting with #).</summary>
        public const string Header = "# rllink demonstrations: RLlink episode chunks, one JSON object a line (docs/training.md)";

        readonly StreamWriter writer;
        readonly List<float[]> obs = new List<float[]>();
        readonly List<object> actions = new List<object>();
        readonly List<float> rewards = new List<float>();
        readonly List<float[]> masks = new List<float[]>();
        int maskWidth;

        /// <summary>The file the episodes go to.</summary>
        public string Path { get; private set; }
        /// <summary>agent_id written on each episode (null: none; the gateway maps it to a module).</summary>
        public string AgentId;
        /// <summary>module_id written on each episode (null: none; wins over the agent's mapping).</summary>
        public string ModuleId;
        /// <summary>Episodes written so far.</summary>
        public int Episodes { get; private set; }
        /// <summary>Steps (actions) written so far.</summary>
        public long Steps { get; private set; }

        /// <summary>Opens (or creates) <paramref name="path"/> for appending; an IOException or
        /// UnauthorizedAccessException when it cannot be written, with the path in its message.</summary>
        public DemoRecorder(string path)
        {
            if (string.IsNullOrEmpty(path)) throw new ArgumentException("a demonstrations file needs a path");
            Path = path;
            try
            {
                var stream = new FileStream(path, FileMode.Append, FileAccess.Write, FileShare.Read);
                writer = new StreamWriter(stream, new UTF8Encoding(false)) { NewLine = "\n" };
                if (stream.Length == 0)
                {
                    writer.WriteLine(Header);
                    writer.Flush();
                }
            }
            catch (IOException e)
            {
                throw new IOException("cannot record demonstrations to " + path + ": " + e.Message, e);
            }
            catch (UnauthorizedAccessException e)
            {
                throw new UnauthorizedAccessException("cannot record demonstrations to " + path + ": " + e.Message, e);
            }
        }

        /// <summary>One decision: the observation, the action chosen on it (an int, an int[] or a
        /// float[], as AgentAction holds them) and the action mask it was chosen under (null: all
        /// allowed). The first step of an episode starts it.</summary>
        public void Step(float[] observation, object action, float[] actionMask)
        {
            if (observation == null) throw new ArgumentNullException("observation");
            if (action == null) throw new ArgumentNullException("action");
            if (actionMask != null)
            {
                if (maskWidth != 0 && actionMask.Length != maskWidth)
                    throw new ArgumentException("the action mask holds " + actionMask.Length + " values; this episode's earlier ones held " + maskWidth);
                maskWidth = actionMask.Length;
            }
            obs.Add((float[])observation.Clone());
            actions.Add(Copy(action));
            rewards.Add(0f);
            masks.Add(actionMask == null ? null : (float[])actionMask.Clone());
        }

        /// <summary>Reward for the last step (added up); before an episode's first step there is
        /// no action it can belong to, and it is dropped.</summary>
        public void AddReward(float reward)
        {
            if (rewards.Count > 0) rewards[rewards.Count - 1] += reward;
        }

        /// <summary>The episode is over: <paramref name="finalObservation"/> is the one it ended on.
        /// Writes it as one line and flushes; an episode with no step writes nothing.</summary>
        public void EndEpisode(float[] finalObservation, bool terminated, bool truncated)
        {
            if (!terminated && !truncated) throw new ArgumentException("an episode ends terminated, truncated or both");
            if (finalObservation == null) throw new ArgumentNullException("finalObservation");
            if (actions.Count == 0) return;
            var allObs = new List<float[]>(obs) { (float[])finalObservation.Clone() };
            var chunk = new Dictionary<string, object>();
            if (AgentId != null) chunk["agent_id"] = AgentId;
            if (ModuleId != null) chunk["module_id"] = ModuleId;
            chunk["episode_id"] = Guid.NewGuid().ToString("N");
            chunk["obs"] = allObs;
            chunk["actions"] = actions;
            chunk["rewards"] = rewards;
            chunk["is_terminated"] = terminated;
            chunk["is_truncated"] = truncated;
            if (maskWidth > 0) chunk["action_mask"] = masks.ConvertAll(mask => mask ?? AllAllowed(maskWidth));
            writer.WriteLine(Json.Serialize(chunk));
            writer.Flush();
            Episodes++;
            Steps += actions.Count;
            Clear();
        }

        /// <summary>Closes the file; an episode not ended is not written.</summary>
        public void Dispose()
        {
            Clear();
            writer.Dispose();
        }

        void Clear()
        {
            obs.Clear();
            actions.Clear();
            rewards.Clear();
            masks.Clear();
            maskWidth = 0;
        }

        static object Copy(object action)
        {
            var array = action as Array;
            return array == null ? action : array.Clone();
        }

        static float[] AllAllowed(int width)
        {
            var ones = new float[width];
            for (int i = 0; i < width; i++) ones[i] = 1f;
            return ones;
        }
    }
}
