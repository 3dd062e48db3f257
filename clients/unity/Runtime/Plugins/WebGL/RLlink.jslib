// RLlink.jslib: the Unity WebGL bridge from C# (RLlinkWebGL.cs) to static/rllink.js,
// the gateway's RLlink client for browsers, over the gateway's WebSocket endpoint.
//
// A WebGL player cannot open a TCP socket, so C# calls these functions (DllImport
// "__Internal") and rllink.js speaks RLlink over ws(s)://host:port/rllink. Every call
// returns at once: a call that talks to the gateway returns a ticket, and C# polls it
// (RLlink_Poll: 0 pending, 1 done, 2 failed) and takes its result as a JSON string
// (RLlink_TakeResult: the reply, or {type: 'ERROR', code, message, request, episode_id,
// details} for an ERROR frame or a broken connection), as Unity WebGL plugins pass
// results back to C#. The requests with no reply (LOG_ACTION, LOG_RETURNS, END_EPISODE)
// get a ticket too: rllink.js sends a PING after each (its `{ack: true}` form), so the
// ticket ends 1 (result: that PONG) once the gateway has accepted the request, or 2 with
// the ERROR that refused it. C# polls those tickets for errors, or forgets them.
// Strings arrive as UTF-8 pointers (UTF8ToString), observations as float* into
// HEAPF32 with a length, strings go back through _malloc/stringToUTF8 (C# frees them).
// Requests go out in the order of the calls, so C# may pipeline (START_EPISODE with its
// own episode id, then GET_ACTION for it, in one frame).
//
// rllink.js is loaded once per URL with a dynamic import: by default from the gateway
// that the WebSocket URL names (http(s)://host:port/static/rllink.js); a build served
// from another origin needs that origin in the gateway's cors_origins (or serve a copy
// of rllink.js with the build and pass its URL). If the page already imported it and
// set window.RLlinkModule, that module is used.
//
// Plain ES5 syntax (no arrow functions, no import statement): Unity's Emscripten
// versions all accept it.

var RLlinkWebGLPlugin = {
  $RLlinkBridge: {
    connections: {},
    nextConnection: 1,
    tickets: {},
    nextTicket: 1,
    modules: {},

    str: function (ptr) {
      return ptr ? UTF8ToString(ptr) : '';
    },

    returnString: function (text) {
      var size = lengthBytesUTF8(text) + 1;
      var buffer = _malloc(size);
      stringToUTF8(text, buffer, size);
      return buffer;
    },

    floats: function (ptr, length) {
      var values = new Array(length);
      var start = ptr >> 2;
      for (var i = 0; i < length; i++) values[i] = HEAPF32[start + i];
      return values;
    },

    moduleUrl: function (socketUrl, given) {
      if (given) return new URL(given, document.baseURI).href;
      var url = new URL(socketUrl);
      url.protocol = url.protocol === 'wss:' ? 'https:' : 'http:';
      url.pathname = '/static/rllink.js';
      url.search = '';
      url.hash = '';
      return url.href;
    },

    loadModule: function (url) {
      if (typeof window !== 'undefined' && window.RLlinkModule) return Promise.resolve(window.RLlinkModule);
      if (!RLlinkBridge.modules[url]) {
        // import() hidden from Emscripten's parser, which may not know the syntax.
        RLlinkBridge.modules[url] = new Function('url', 'return import(url)')(url);
      }
      return RLlinkBridge.modules[url];
    },

    errorJson: function (error, request) {
      var info = error || {};
      return JSON.stringify({
        type: 'ERROR',
        code: info.code || 'error',
        message: info.message || String(error),
        request: info.request || request || null,
        episode_id: info.episodeId === undefined ? null : info.episodeId,
        details: info.details === undefined ? null : info.details,
      });
    },

    // A ticket for a Promise: C# polls it and takes its result.
    track: function (promise, request) {
      var id = RLlinkBridge.nextTicket++;
      var ticket = { state: 0, result: null };
      RLlinkBridge.tickets[id] = ticket;
      promise.then(
        function (reply) {
          ticket.state = 1;
          ticket.result = JSON.stringify(reply === undefined ? null : reply);
        },
        function (error) {
          ticket.state = 2;
          ticket.result = RLlinkBridge.errorJson(error, request);
        }
      );
      return id;
    },

    // Run call(client) once the connection is ready, in the order of the calls.
    withClient: function (connectionId, request, call) {
      var connection = RLlinkBridge.connections[connectionId];
      if (!connection) {
        return RLlinkBridge.track(
          Promise.reject({ code: 'connection_closed', message: 'no RLlink connection ' + connectionId }), request);
      }
      return RLlinkBridge.track(connection.ready.then(call), request);
    },
  },

  // -- Connection -----------------------------------------------------------------------

  // Open a connection: ws(s)://host:port/rllink, the gateway's token ('' for none), the URL
  // of rllink.js ('' for the gateway's). Returns its id at once; RLlink_Status says when
  // the handshake (PING with the token, GET_CONFIG) is done.
  RLlink_Connect: function (urlPtr, tokenPtr, moduleUrlPtr) {
    var url = RLlinkBridge.str(urlPtr);
    var token = RLlinkBridge.str(tokenPtr) || null;
    var id = RLlinkBridge.nextConnection++;
    var connection = { status: 0, error: null, config: null, client: null };
    RLlinkBridge.connections[id] = connection;
    var failed = function (error) {
      connection.status = -1;
      connection.error = connection.error || RLlinkBridge.errorJson(error, 'CONNECT');
      throw error;
    };
    connection.ready = RLlinkBridge.loadModule(RLlinkBridge.moduleUrl(url, RLlinkBridge.str(moduleUrlPtr)))
      .then(function (rllink) {
        return rllink.RLlinkClient.connect(url, { token: token });
      })
      .then(function (client) {
        connection.client = client;
        client.onclose = function (error) {
          connection.status = -1;
          connection.error = connection.error || RLlinkBridge.errorJson(error, null);
        };
        return client.handshake().then(function (config) {
          connection.config = JSON.stringify(config);
          if (connection.status === 0) connection.status = 1;
          return client;
        });
      })
      .then(null, failed);
    connection.ready.then(null, function () {}); // reported through RLlink_Status / RLlink_Error
    return id;
  },

  // 0 connecting, 1 ready, -1 failed or closed (RLlink_Error says why).
  RLlink_Status: function (connectionId) {
    var connection = RLlinkBridge.connections[connectionId];
    return connection ? connection.status : -1;
  },

  // Why the connection failed or closed, as {code, message, ...} JSON; '' if it did not.
  RLlink_Error: function (connectionId) {
    var connection = RLlinkBridge.connections[connectionId];
    return RLlinkBridge.returnString(connection ? connection.error || '' : '');
  },

  // The gateway's SET_CONFIG, as JSON ('' until ready).
  RLlink_Config: function (connectionId) {
    var connection = RLlinkBridge.connections[connectionId];
    return RLlinkBridge.returnString(connection && connection.config ? connection.config : '');
  },

  RLlink_Close: function (connectionId) {
    var connection = RLlinkBridge.connections[connectionId];
    if (!connection) return;
    delete RLlinkBridge.connections[connectionId];
    connection.ready.then(function (client) { client.close(); }, function () {});
  },

  // -- Requests (each returns a ticket) ----------------------------------------------------

  // Any request that gets a reply, as JSON: '{"type":"GET_STATE"}', EPISODES_AND_GET_STATE, ...
  RLlink_Request: function (connectionId, jsonPtr) {
    var message = JSON.parse(RLlinkBridge.str(jsonPtr));
    return RLlinkBridge.withClient(connectionId, message.type, function (client) {
      return client.request(message);
    });
  },

  // START_EPISODE; options JSON: {episode_id?, agent_id?, module_id?, training_enabled?}
  // ('' for none). Result: EPISODE_STARTED {episode_id, evaluation?}. Give your own
  // episode_id to send GET_ACTION for it at once, without waiting for this reply.
  RLlink_StartEpisode: function (connectionId, optionsPtr) {
    var options = JSON.parse(RLlinkBridge.str(optionsPtr) || '{}');
    return RLlinkBridge.withClient(connectionId, 'START_EPISODE', function (client) {
      return client.startEpisode({
        episodeId: options.episode_id,
        agentId: options.agent_id,
        moduleId: options.module_id,
        trainingEnabled: options.training_enabled !== false,
      });
    });
  },

  // GET_ACTION for one episode: obs as float* and length. Result: ACTION {episode_id, action, weights_seq_no}.
  RLlink_GetAction: function (connectionId, episodeIdPtr, obsPtr, obsLength, explore) {
    var episodeId = RLlinkBridge.str(episodeIdPtr);
    var obs = RLlinkBridge.floats(obsPtr, obsLength);
    return RLlinkBridge.withClient(connectionId, 'GET_ACTION', function (client) {
      return client.getAction(episodeId, obs, { explore: !!explore });
    });
  },

  // GET_ACTION for many episodes: batch JSON [{episode_id, obs, explore?, action_mask?}, ...]
  // (WebGLAgentLink sends a masked step as a batch of one: the single form takes no mask).
  // Result: ACTION {actions: [...], weights_seq_no}, in the batch's order.
  RLlink_GetActions: function (connectionId, batchPtr) {
    var batch = JSON.parse(RLlinkBridge.str(batchPtr));
    return RLlinkBridge.withClient(connectionId, 'GET_ACTION', function (client) {
      return client.getActions(batch);
    });
  },

  // LOG_ACTION: an action the game chose itself (action JSON: 1 or [0.5, -1]). No reply:
  // the ticket ends 1 once the gateway accepted it, 2 with its ERROR (see the header).
  RLlink_LogAction: function (connectionId, episodeIdPtr, obsPtr, obsLength, actionPtr) {
    var episodeId = RLlinkBridge.str(episodeIdPtr);
    var obs = RLlinkBridge.floats(obsPtr, obsLength);
    var action = JSON.parse(RLlinkBridge.str(actionPtr));
    return RLlinkBridge.withClient(connectionId, 'LOG_ACTION', function (client) {
      return client.logAction(episodeId, obs, action, { ack: true });
    });
  },

  // LOG_RETURNS: reward for the episode's last action. No reply (ticket as LOG_ACTION's).
  RLlink_LogReturns: function (connectionId, episodeIdPtr, reward) {
    var episodeId = RLlinkBridge.str(episodeIdPtr);
    return RLlinkBridge.withClient(connectionId, 'LOG_RETURNS', function (client) {
      return client.logReturns(episodeId, reward, { ack: true });
    });
  },

  // END_EPISODE with the final observation and the done flags (at least one true). No
  // reply (ticket as LOG_ACTION's).
  RLlink_EndEpisode: function (connectionId, episodeIdPtr, obsPtr, obsLength, terminated, truncated) {
    var episodeId = RLlinkBridge.str(episodeIdPtr);
    var obs = RLlinkBridge.floats(obsPtr, obsLength);
    return RLlinkBridge.withClient(connectionId, 'END_EPISODE', function (client) {
      return client.endEpisode(episodeId, obs, { terminated: !!terminated, truncated: !!truncated, ack: true });
    });
  },

  // -- Tickets -------------------------------------------------------------------------------

  // 0 pending, 1 done, 2 failed, -1 no such ticket (taken already).
  RLlink_Poll: function (ticketId) {
    var ticket = RLlinkBridge.tickets[ticketId];
    return ticket ? ticket.state : -1;
  },

  // The result of a finished ticket (the reply, or the error as {type: 'ERROR', code,
  // message, request, details}) as JSON, and forget the ticket; '' while pending.
  RLlink_TakeResult: function (ticketId) {
    var ticket = RLlinkBridge.tickets[ticketId];
    if (!ticket || ticket.state === 0) return RLlinkBridge.returnString('');
    delete RLlinkBridge.tickets[ticketId];
    return RLlinkBridge.returnString(ticket.result);
  },

  // Forget a ticket whose result is not wanted (fire and forget).
  RLlink_Forget: function (ticketId) {
    delete RLlinkBridge.tickets[ticketId];
  },
};

autoAddDeps(RLlinkWebGLPlugin, '$RLlinkBridge');
mergeInto(LibraryManager.library, RLlinkWebGLPlugin);
