// A small JSON reader and writer for RLlink messages, so the kit needs no package:
// Unity's JsonUtility cannot read dictionaries or mixed lists, and Newtonsoft is not
// in every Unity project (nor in Debian's mono by default).
//
// Reading gives Dictionary<string, object> for objects, List<object> for arrays, double
// for numbers, string, bool and null. Writing takes those, plus IDictionary, IEnumerable
// (float[], int[], List<float>, ...), every numeric type and bool. Numbers are written
// with the invariant culture; NaN and infinities are refused (the gateway refuses them).
//
// Plain C# 6 (no Unity types): Unity and Debian's mcs compile it.

using System;
using System.Collections;
using System.Collections.Generic;
using System.Globalization;
using System.Text;

namespace RLlink
{
    public static class Json
    {
        // -- Writing ------------------------------------------------------------------

        public static string Serialize(object value)
        {
            var builder = new StringBuilder(64);
            Write(builder, value);
            return builder.ToString();
        }

        static void Write(StringBuilder sb, object value)
        {
            if (value == null) { sb.Append("null"); return; }
            var s = value as string;
            if (s != null) { WriteString(sb, s); return; }
            if (value is bool) { sb.Append((bool)value ? "true" : "false"); return; }
            if (value is float) { WriteNumber(sb, (float)value); return; }
            if (value is double) { WriteNumber(sb, (double)value); return; }
            if (value is int || value is long || value is short || value is byte || value is sbyte
                || value is uint || value is ulong || value is ushort)
            {
                sb.Append(Convert.ToString(value, CultureInfo.InvariantCulture));
                return;
            }
            if (value is decimal) { sb.Append(((decimal)value).ToString(CultureInfo.InvariantCulture)); return; }
            var floats = value as float[];
            if (floats != null)
            {
                sb.Append('[');
                for (int i = 0; i < floats.Length; i++)
                {
                    if (i > 0) sb.Append(',');
                    WriteNumber(sb, floats[i]);
                }
                sb.Append(']');
                return;
            }
            var dict = value as IDictionary;
            if (dict != null)
            {
                sb.Append('{');
                bool first = true;
                foreach (DictionaryEntry entry in dict)
                {
                    if (!first) sb.Append(',');
                    first = false;
                    WriteString(sb, Convert.ToString(entry.Key, CultureInfo.InvariantCulture));
                    sb.Append(':');
                    Write(sb, entry.Value);
                }
                sb.Append('}');
                return;
            }
            var list = value as IEnumerable;
            if (list != null)
            {
                sb.Append('[');
                bool first = true;
                foreach (var item in list)
                {
                    if (!first) sb.Append(',');
                    first = false;
                    Write(sb, item);
                }
                sb.Append(']');
                return;
            }
            if (value is Enum) { WriteString(sb, value.ToString()); return; }
            throw new ArgumentException("cannot write a " + value.GetType().Name + " as JSON");
        }

        static void WriteNumber(StringBuilder sb, float value)
        {
            if (float.IsNaN(value) || float.IsInfinity(value))
                throw new ArgumentException("JSON has no NaN or infinity (and the gateway refuses them): " + value);
            sb.Append(value.ToString("R", CultureInfo.InvariantCulture));
        }

        static void WriteNumber(StringBuilder sb, double value)
        {
            if (double.IsNaN(value) || double.IsInfinity(value))
                throw new ArgumentException("JSON has no NaN or infinity (and the gateway refuses them): " + value);
            sb.Append(value.ToString("R", CultureInfo.InvariantCulture));
        }

        static void WriteString(StringBuilder sb, string s)
        {
            sb.Append('"');
            foreach (char c in s)
            {
                switch (c)
                {
                    case '"': sb.Append("\\\""); break;
                    case '\\': sb.Append("\\\\"); break;
                    case '\n': sb.Append("\\n"); break;
                    case '\r': sb.Append("\\r"); break;
                    case '\t': sb.Append("\\t"); break;
                    case '\b': sb.Append("\\b"); break;
                    case '\f': sb.Append("\\f"); break;
                    default:
                        if (c < 0x20) sb.Append("\\u").Append(((int)c).ToString("x4"));
                        else sb.Append(c);
                        break;
                }
            }
            sb.Append('"');
        }

        // -- Reading ------------------------------------------------------------------

        public static object Parse(string text)
        {
            var parser = new Parser(text);
            parser.SkipSpace();
            var value = parser.ReadValue();
            parser.SkipSpace();
            if (!parser.AtEnd) throw parser.Fail("unexpected text after the value");
            return value;
        }

        /// <summary>Parse a JSON object (a message body); anything else is a FormatException.</summary>
        public static Dictionary<string, object> ParseObject(string text)
        {
            var value = Parse(text) as Dictionary<string, object>;
            if (value == null) throw new FormatException("expected a JSON object");
            return value;
        }

        sealed class Parser
        {
            readonly string text;
            int pos;

            public Parser(string text) { this.text = text; }

            public bool AtEnd { get { return pos >= text.Length; } }

            public FormatException Fail(string what)
            {
                return new FormatException("bad JSON at character " + pos + ": " + what);
            }

            public void SkipSpace()
            {
                while (pos < text.Length)
                {
                    char c = text[pos];
                    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') pos++;
                    else break;
                }
            }

            public object ReadValue()
            {
                if (AtEnd) throw Fail("unexpected end");
                char c = text[pos];
                switch (c)
                {
                    case '{': return ReadObject();
                    case '[': return ReadArray();
                    case '"': return ReadString();
                    case 't': Expect("true"); return true;
                    case 'f': Expect("false"); return false;
                    case 'n': Expect("null"); return null;
                    default:
                        if (c == '-' || (c >= '0' && c <= '9')) return ReadNumber();
                        throw Fail("unexpected '" + c + "'");
                }
            }

            void Expect(string word)
            {
                if (string.CompareOrdinal(text, pos, word, 0, word.Length) != 0) throw Fail("expected " + word);
                pos += word.Length;
            }

            Dictionary<string, object> ReadObject()
            {
                var result = new Dictionary<string, object>();
                pos++; // {
                SkipSpace();
                if (!AtEnd && text[pos] == '}') { pos++; return result; }
                while (true)
                {
                    SkipSpace();
                    if (AtEnd || text[pos] != '"') throw Fail("expected a key");
                    string key = ReadString();
                    SkipSpace();
                    if (AtEnd || text[pos] != ':') throw Fail("expected ':'");
                    pos++;
                    SkipSpace();
                    result[key] = ReadValue();
                    SkipSpace();
                    if (AtEnd) throw Fail("unexpected end in an object");
                    char c = text[pos++];
                    if (c == '}') return result;
                    if (c != ',') throw Fail("expected ',' or '}'");
                }
            }

            List<object> ReadArray()
            {
                var result = new List<object>();
                pos++; // [
                SkipSpace();
                if (!AtEnd && text[pos] == ']') { pos++; return result; }
                while (true)
                {
                    SkipSpace();
                    result.Add(ReadValue());
                    SkipSpace();
                    if (AtEnd) throw Fail("unexpected end in an array");
                    char c = text[pos++];
                    if (c == ']') return result;
                    if (c != ',') throw Fail("expected ',' or ']'");
                }
            }

            string ReadString()
            {
                pos++; // opening quote
                StringBuilder sb = null;
                int start = pos;
                while (true)
                {
                    if (AtEnd) throw Fail("unterminated string");
                    char c = text[pos];
                    if (c == '"')
                    {
                        string tail = text.Substring(start, pos - start);
                        pos++;
                        return sb == null ? tail : sb.Append(tail).ToString();
                    }
                    if (c != '\\') { pos++; continue; }
                    if (sb == null) sb = new StringBuilder();
                    sb.Append(text, start, pos - start);
                    pos++;
                    if (AtEnd) throw Fail("unterminated escape");
                    char e = text[pos++];
                    switch (e)
                    {
                        case '"': sb.Append('"'); break;
                        case '\\': sb.Append('\\'); break;
                        case '/': sb.Append('/'); break;
                        case 'b': sb.Append('\b'); break;
                        case 'f': sb.Append('\f'); break;
                        case 'n': sb.Append('\n'); break;
                        case 'r': sb.Append('\r'); break;
                        case 't': sb.Append('\t'); break;
                        case 'u':
                            if (pos + 4 > text.Length) throw Fail("short \\u escape");
                            sb.Append((char)int.Parse(text.Substring(pos, 4), NumberStyles.HexNumber, CultureInfo.InvariantCulture));
                            pos += 4;
                            break;
                        default: throw Fail("bad escape \\" + e);
                    }
                    start = pos;
                }
            }

            object ReadNumber()
            {
                int start = pos;
                if (text[pos] == '-') pos++;
                while (pos < text.Length)
                {
                    char c = text[pos];
                    if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-') pos++;
                    else break;
                }
                double value;
                if (!double.TryParse(text.Substring(start, pos - start), NumberStyles.Float, CultureInfo.InvariantCulture, out value))
                    throw Fail("bad number");
                return value;
            }
        }

        // -- Reading helpers for parsed values ---------------------------------------------

        public static string GetString(IDictionary<string, object> obj, string key, string fallback = null)
        {
            object value;
            return obj != null && obj.TryGetValue(key, out value) && value is string ? (string)value : fallback;
        }

        public static double GetNumber(IDictionary<string, object> obj, string key, double fallback = 0)
        {
            object value;
            return obj != null && obj.TryGetValue(key, out value) && value is double ? (double)value : fallback;
        }

        public static int GetInt(IDictionary<string, object> obj, string key, int fallback = 0)
        {
            return (int)GetNumber(obj, key, fallback);
        }

        public static bool GetBool(IDictionary<string, object> obj, string key, bool fallback = false)
        {
            object value;
            return obj != null && obj.TryGetValue(key, out value) && value is bool ? (bool)value : fallback;
        }

        public static Dictionary<string, object> GetObject(IDictionary<string, object> obj, string key)
        {
            object value;
            return obj != null && obj.TryGetValue(key, out value) ? value as Dictionary<string, object> : null;
        }

        public static List<object> GetList(IDictionary<string, object> obj, string key)
        {
            object value;
            return obj != null && obj.TryGetValue(key, out value) ? value as List<object> : null;
        }

        /// <summary>A parsed JSON number list (possibly nested) flattened to floats.</summary>
        public static float[] ToFloats(object value)
        {
            var result = new List<float>();
            Flatten(value, result);
            return result.ToArray();
        }

        static void Flatten(object value, List<float> into)
        {
            if (value is double) { into.Add((float)(double)value); return; }
            var list = value as IList;
            if (list == null) throw new FormatException("expected a number or a list of numbers");
            foreach (var item in list) Flatten(item, into);
        }

        public static int[] ToInts(object value)
        {
            var floats = ToFloats(value);
            var ints = new int[floats.Length];
            for (int i = 0; i < floats.Length; i++) ints[i] = (int)floats[i];
            return ints;
        }
    }
}
