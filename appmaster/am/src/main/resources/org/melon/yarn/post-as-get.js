// Served by the MeLoN ApplicationMaster in front of TensorBoard (TensorBoardProxy.java), loaded first by its page.
// Hadoop's RM web proxy forwards GET (and PUT, mangling its body), not POST, and TensorBoard's dashboards fetch
// their charts by POST. So a POST to TensorBoard of a form or a text body goes out as a GET of
//   <root>__melon/post/<path>?<query>&__melon_form=<the body>[&__melon_type=<its Content-Type>]
// (both base64url of UTF-8: the RM proxy decodes the query and chokes on some characters, "{" for one), which
// the AM hands to TensorBoard as the POST it was. Anything else (a file upload) is left alone.
(function () {
  var ROOT = new URL("..", document.currentScript.src).href; // this file is <root>__melon/post-as-get.js

  function form(body) {
    if (body === undefined || body === null) {
      return "";
    }
    if (typeof body === "string") {
      return body;
    }
    if (body instanceof URLSearchParams) {
      return body.toString();
    }
    if (body instanceof FormData) {
      var params = new URLSearchParams();
      var plain = true;
      body.forEach(function (value, key) {
        if (typeof value === "string") {
          params.append(key, value);
        } else {
          plain = false; // a file: not ours to carry
        }
      });
      return plain ? params.toString() : null;
    }
    return null;
  }

  function b64(text) {
    var bytes = new TextEncoder().encode(text);
    var bin = "";
    for (var i = 0; i < bytes.length; i++) {
      bin += String.fromCharCode(bytes[i]);
    }
    return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }

  // type: the Content-Type the page gave a text body (JSON, say); a form is sent URL-encoded
  function asGet(url, body, type) {
    var fields = form(body);
    var href = new URL(url, document.baseURI).href;
    if (fields === null || href.indexOf(ROOT) !== 0) {
      return null;
    }
    var rest = href.substring(ROOT.length).split("#")[0];
    var text = typeof body === "string" && type;
    return ROOT + "__melon/post/" + rest + (rest.indexOf("?") < 0 ? "?" : "&") + "__melon_form=" + b64(fields)
        + (text ? "&__melon_type=" + b64(type) : "");
  }

  function contentType(headers) {
    var found = null;
    (headers || []).forEach(function (h) {
      if (/^content-type$/i.test(h[0])) {
        found = h[1];
      }
    });
    return found;
  }

  var proto = XMLHttpRequest.prototype;
  var open = proto.open;
  var send = proto.send;
  var setHeader = proto.setRequestHeader;
  proto.open = function (method, url) {
    this.__melonPost = String(method).toUpperCase() === "POST"
        ? {args: Array.prototype.slice.call(arguments), headers: []} : null;
    return open.apply(this, arguments);
  };
  proto.setRequestHeader = function (name, value) {
    if (this.__melonPost) {
      this.__melonPost.headers.push([name, value]);
    }
    return setHeader.apply(this, arguments);
  };
  proto.send = function (body) {
    var post = this.__melonPost;
    var url = post ? asGet(post.args[1], body, contentType(post.headers)) : null;
    if (!url) {
      return send.apply(this, arguments);
    }
    this.__melonPost = null;
    var args = post.args.slice();
    args[0] = "GET";
    args[1] = url;
    open.apply(this, args);
    for (var i = 0; i < post.headers.length; i++) {
      if (!/^content-type$/i.test(post.headers[i][0])) {
        setHeader.call(this, post.headers[i][0], post.headers[i][1]);
      }
    }
    return send.call(this, null);
  };

  if (window.fetch) {
    var fetch = window.fetch;
    window.fetch = function (input, init) {
      if (typeof input === "string" && init && String(init.method || "").toUpperCase() === "POST") {
        var headers = init.headers instanceof Headers ? Array.from(init.headers.entries())
            : Array.isArray(init.headers) ? init.headers : Object.entries(init.headers || {});
        var url = asGet(input, init.body, contentType(headers));
        if (url) {
          input = url;
          init = Object.assign({}, init, {method: "GET", body: undefined});
        }
      }
      return fetch.call(this, input, init);
    };
  }
})();
