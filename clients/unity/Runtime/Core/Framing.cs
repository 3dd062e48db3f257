// RLlink framing: 8 ASCII digits giving the body's length in bytes, then the body (a
// UTF-8 JSON object with a "type"). The same frames travel over TCP and, inside
// WebSocket messages, over the gateway's /rllink endpoint.

using System;
using System.IO;
using System.Text;

namespace RLlink
{
    public static class Framing
    {
        public const int HeaderSize = 8;
        public const int MaxBodySize = 99999999; // what 8 digits can announce

        static readonly UTF8Encoding Utf8 = new UTF8Encoding(false, true);

        /// <summary>One frame: the 8-digit byte length of the UTF-8 body, then the body.</summary>
        public static byte[] Encode(string jsonBody)
        {
            byte[] body = Utf8.GetBytes(jsonBody);
            if (body.Length > MaxBodySize)
                throw new ArgumentException("a frame body of " + body.Length + " bytes does not fit an 8-digit header");
            byte[] frame = new byte[HeaderSize + body.Length];
            int size = body.Length;
            for (int i = HeaderSize - 1; i >= 0; i--)
            {
                frame[i] = (byte)('0' + size % 10);
                size /= 10;
            }
            Buffer.BlockCopy(body, 0, frame, HeaderSize, body.Length);
            return frame;
        }

        /// <summary>
        /// The next frame's body from a stream, as a string; null at a clean end of stream
        /// (between frames). Throws RLlinkException(bad_frame) for a header that is not 8
        /// ASCII digits or a body that is not UTF-8, and IOException for a stream cut mid-frame.
        /// </summary>
        public static string ReadFrame(Stream stream, int maxBodySize = MaxBodySize)
        {
            byte[] header = new byte[HeaderSize];
            if (!ReadExactly(stream, header, HeaderSize, true)) return null;
            int size = 0;
            foreach (byte b in header)
            {
                if (b < (byte)'0' || b > (byte)'9')
                    throw new RLlinkException(RLlinkException.BadFrame,
                        "the gateway sent a bad frame header " + Escape(header) + ": expected 8 ASCII digits");
                size = size * 10 + (b - '0');
            }
            if (size > maxBodySize)
                throw new RLlinkException(RLlinkException.BadFrame, "the gateway announced a frame of " + size + " bytes, over " + maxBodySize);
            byte[] body = new byte[size];
            ReadExactly(stream, body, size, false);
            try
            {
                return Utf8.GetString(body);
            }
            catch (ArgumentException)
            {
                throw new RLlinkException(RLlinkException.BadFrame, "the gateway sent a frame body that is not UTF-8");
            }
        }

        static bool ReadExactly(Stream stream, byte[] buffer, int count, bool endAllowed)
        {
            int got = 0;
            while (got < count)
            {
                int n = stream.Read(buffer, got, count - got);
                if (n <= 0)
                {
                    if (got == 0 && endAllowed) return false;
                    throw new IOException("the connection closed after " + got + " of " + count + " bytes of a frame");
                }
                got += n;
            }
            return true;
        }

        static string Escape(byte[] bytes)
        {
            var sb = new StringBuilder("\"");
            foreach (byte b in bytes) sb.Append(b >= 0x20 && b < 0x7f ? ((char)b).ToString() : "\\x" + b.ToString("x2"));
            return sb.Append('"').ToString();
        }
    }
}
