// Errors the game can catch: an ERROR frame from the gateway (Code, Message, Details),
// or a failure of the connection seen by this client.

using System;
using System.Collections.Generic;

namespace RLlink
{
    /// <summary>
    /// The gateway refused a request (an ERROR frame), or the connection failed.
    /// <para><see cref="Code"/> is the gateway's error code (README, "Errors"):
    /// <c>unauthorized</c>, <c>invalid_message</c>, <c>unknown_episode</c>,
    /// <c>too_many_episodes</c>, <c>too_many_connections</c>, <c>idle_timeout</c>, ...;
    /// or one of this client's own: <c>connection_closed</c> (the socket broke or could
    /// not be opened), <c>bad_frame</c> (the gateway sent something that is not a frame),
    /// <c>unexpected_reply</c>.</para>
    /// </summary>
    public class RLlinkException : Exception
    {
        public const string ConnectionClosed = "connection_closed";
        public const string BadFrame = "bad_frame";
        public const string UnexpectedReply = "unexpected_reply";

        /// <summary>The gateway's error code, or one of this client's (see above).</summary>
        public string Code { get; private set; }

        /// <summary>The gateway's human-readable message (without the code).</summary>
        public string GatewayMessage { get; private set; }

        /// <summary>The ERROR frame's <c>details</c> (parsed JSON), or null.</summary>
        public object Details { get; private set; }

        /// <summary>The type of the request that was refused (e.g. <c>GET_ACTION</c>), when known.</summary>
        public string Request { get; private set; }

        /// <summary>True when the gateway closes the connection after this error (or it is already closed).</summary>
        public bool IsFatal { get { return IsFatalCode(Code); } }

        public RLlinkException(string code, string message, object details = null, string request = null, Exception inner = null)
            : base(Describe(code, message, request), inner)
        {
            Code = code;
            GatewayMessage = message;
            Details = details;
            Request = request;
        }

        /// <summary>An ERROR frame as an exception.</summary>
        public static RLlinkException FromErrorFrame(IDictionary<string, object> frame, string request)
        {
            object details;
            frame.TryGetValue("details", out details);
            return new RLlinkException(Json.GetString(frame, "code", "error"), Json.GetString(frame, "message", ""), details, request);
        }

        /// <summary>Codes after which the gateway closes the connection.</summary>
        public static bool IsFatalCode(string code)
        {
            switch (code)
            {
                case "bad_header":
                case "frame_too_large":
                case "unauthorized":
                case "too_many_connections":
                case "frame_timeout":
                case "idle_timeout":
                case ConnectionClosed:
                case BadFrame:
                    return true;
                default:
                    return false;
            }
        }

        static string Describe(string code, string message, string request)
        {
            return (request != null ? request + " refused: " : "") + "[" + code + "] " + message;
        }
    }
}
