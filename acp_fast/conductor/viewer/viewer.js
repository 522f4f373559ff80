// acp-fast trace view: the page's script (inlined by acp_fast.conductor.trace_view).
// The diagram is virtualised: only the rows in the viewport (plus OVERSCAN) are in the SVG,
// redrawn once per animation frame while scrolling. The model (lanes, sessions, methods,
// rows with pairing) comes from the JSON island #trace-data; see trace_view.py.
(function () {
  "use strict";
  var ROW_H = 24, GUTTER = 96, MIN_LANE_W = 150, OVERSCAN = 20, HEAD = 7;
  var KIND_CLASS = ["req", "resp", "note"];
  var data = JSON.parse(document.getElementById("trace-data").textContent);
  var rows = data.rows, events = data.events, lanes = data.lanes, methods = data.methods,
      sessions = data.sessions, kinds = data.kinds;
  var total = rows.length;
  var el = function (id) { return document.getElementById(id); };
  var scroller = el("scroller"), spacer = el("spacer"), svg = el("rows"), head = el("lane-head");
  var state = { session: "all", hide: new Set(), hideMethods: new Set(), kinds: new Set(kinds),
                errors: false, sel: -1 };
  var visible = new Int32Array(0), posOf = new Int32Array(total), laneX = [], shownLanes = [];
  var width = 0, pending = false;

  function esc(s) {
    return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
  }
  function idText(v) { return v === undefined ? "" : JSON.stringify(v); }
  function count(pred) { var n = 0; for (var i = 0; i < total; i++) if (pred(rows[i])) n++; return n; }

  // ---- controls ---------------------------------------------------------------------
  function option(value, text) {
    var o = document.createElement("option"); o.value = value; o.textContent = text; return o;
  }
  function checkbox(parent, name, text, n, onChange) {
    var label = document.createElement("label"), box = document.createElement("input"), span = document.createElement("span");
    box.type = "checkbox"; box.checked = true; box.dataset.name = name;
    box.addEventListener("change", function () { onChange(name, box.checked); });
    span.className = "n"; span.textContent = " " + n;
    label.title = name;
    label.appendChild(box); label.appendChild(document.createTextNode(" " + text)); label.appendChild(span);
    parent.appendChild(label);
    return box;
  }
  function buildControls() {
    var pick = el("session");
    pick.appendChild(option("all", "all sessions (" + total + ")"));
    pick.appendChild(option("none", "no session (" + count(function (r) { return r[4] < 0; }) + ")"));
    sessions.forEach(function (s, i) {
      pick.appendChild(option(s, s + " (" + count(function (r) { return r[4] === i; }) + ")"));
    });
    pick.addEventListener("change", function () { state.session = pick.value; changed(); });
    var laneBox = el("lane-filter");
    lanes.forEach(function (name, i) {
      checkbox(laneBox, name, name, count(function (r) { return r[1] === i || r[2] === i; }), function (n, on) {
        if (on) state.hide.delete(n); else state.hide.add(n);
        changed();
      });
    });
    var methodBox = el("method-filter");
    var perMethod = methods.map(function () { return 0; });
    rows.forEach(function (r) { if (r[3] >= 0) perMethod[r[3]]++; });
    methods.map(function (m, i) { return i; })
      .sort(function (a, b) { return methods[a] < methods[b] ? -1 : methods[a] > methods[b] ? 1 : 0; })
      .forEach(function (i) {
        checkbox(methodBox, methods[i], methods[i], perMethod[i], function (n, on) {
          if (on) state.hideMethods.delete(n); else state.hideMethods.add(n);
          changed();
        });
      });
    el("methods-all").addEventListener("click", function () { state.hideMethods.clear(); changed(); });
    el("methods-none").addEventListener("click", function () { methods.forEach(function (m) { state.hideMethods.add(m); }); changed(); });
    el("method-search").addEventListener("input", function (ev) {
      var q = ev.target.value.toLowerCase();
      methodBox.querySelectorAll("label").forEach(function (l) {
        l.style.display = l.title.toLowerCase().indexOf(q) >= 0 ? "" : "none";
      });
    });
    var kindBox = el("kinds");
    kinds.forEach(function (k) {
      checkbox(kindBox, k, k + "s", count(function (r) { return kinds[r[0]] === k; }), function (n, on) {
        if (on) state.kinds.add(n); else state.kinds.delete(n);
        changed();
      });
    });
    el("errors").addEventListener("change", function (ev) { state.errors = ev.target.checked; changed(); });
    svg.addEventListener("click", function (ev) {
      var g = ev.target.closest ? ev.target.closest("g.msg") : null;
      if (g) select(+g.dataset.i, false);
    });
    scroller.tabIndex = 0;
    scroller.addEventListener("keydown", function (ev) {
      if (ev.key !== "ArrowDown" && ev.key !== "ArrowUp") return;
      var p = state.sel >= 0 ? posOf[state.sel] : -1;
      p = ev.key === "ArrowDown" ? p + 1 : (p < 0 ? visible.length - 1 : p - 1);
      if (p >= 0 && p < visible.length) { select(visible[p], true); ev.preventDefault(); }
    });
    scroller.addEventListener("scroll", schedule);
    window.addEventListener("resize", function () { layout(); draw(); });
    window.addEventListener("hashchange", function () { readHash(); syncControls(); refilter(); layout(); draw(); detail(); });
  }
  function syncControls() {
    el("session").value = state.session;
    if (el("session").value !== state.session) { state.session = "all"; el("session").value = "all"; }
    el("lane-filter").querySelectorAll("input").forEach(function (b) { b.checked = !state.hide.has(b.dataset.name); });
    el("method-filter").querySelectorAll("input").forEach(function (b) { b.checked = !state.hideMethods.has(b.dataset.name); });
    el("kinds").querySelectorAll("input").forEach(function (b) { b.checked = state.kinds.has(b.dataset.name); });
    el("errors").checked = state.errors;
  }

  // ---- view state in the URL fragment -------------------------------------------------
  function readHash() {
    var q = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      if (!part) return;
      var eq = part.indexOf("=");
      q[decodeURIComponent(eq < 0 ? part : part.slice(0, eq))] = eq < 0 ? "" : part.slice(eq + 1);
    });
    var list = function (v) { return v ? v.split(",").map(decodeURIComponent) : []; };
    state.session = q.session !== undefined ? decodeURIComponent(q.session) : "all";
    state.hide = new Set(list(q.hide));
    state.hideMethods = new Set(list(q.hideMethods));
    state.kinds = new Set(q.kinds !== undefined ? list(q.kinds) : kinds);
    state.errors = q.errors === "1";
    var sel = q.sel !== undefined ? parseInt(q.sel, 10) : -1;
    state.sel = sel >= 0 && sel < total ? sel : -1;
  }
  function writeHash() {
    var parts = [], enc = function (s) { return Array.from(s).map(encodeURIComponent).join(","); };
    if (state.session !== "all") parts.push("session=" + encodeURIComponent(state.session));
    if (state.hide.size) parts.push("hide=" + enc(state.hide));
    if (state.hideMethods.size) parts.push("hideMethods=" + enc(state.hideMethods));
    if (state.kinds.size !== kinds.length) parts.push("kinds=" + enc(state.kinds));
    if (state.errors) parts.push("errors=1");
    if (state.sel >= 0) parts.push("sel=" + state.sel);
    var hash = parts.length ? "#" + parts.join("&") : "";
    if (hash !== location.hash) history.replaceState(null, "", hash || location.pathname + location.search);
  }

  // ---- filtering and layout -----------------------------------------------------------
  function keep(r) {
    if (state.hide.has(lanes[r[1]]) || state.hide.has(lanes[r[2]])) return false;
    if (!state.kinds.has(kinds[r[0]])) return false;
    if (state.errors && !r[6]) return false;
    if (r[3] >= 0 && state.hideMethods.has(methods[r[3]])) return false;
    if (state.session === "all") return true;
    if (state.session === "none") return r[4] < 0;
    return r[4] >= 0 && sessions[r[4]] === state.session;
  }
  function refilter() {
    var out = new Int32Array(total), n = 0;
    posOf.fill(-1);
    for (var i = 0; i < total; i++) if (keep(rows[i])) { posOf[i] = n; out[n++] = i; }
    visible = out.subarray(0, n);
    spacer.style.height = (n * ROW_H + ROW_H) + "px";
  }
  function layout() {
    shownLanes = [];
    lanes.forEach(function (name, i) { if (!state.hide.has(name)) shownLanes.push(i); });
    var avail = Math.max(scroller.clientWidth - GUTTER - 20, 0);
    var laneW = Math.max(MIN_LANE_W, shownLanes.length ? avail / shownLanes.length : 0);
    laneX = lanes.map(function () { return -1; });
    shownLanes.forEach(function (lane, k) { laneX[lane] = GUTTER + laneW * (k + 0.5); });
    width = GUTTER + laneW * shownLanes.length + 10;
    spacer.style.width = width + "px";
    svg.setAttribute("width", width);
    head.innerHTML = shownLanes.map(function (lane) {
      return '<span class="lane" data-lane="' + esc(lanes[lane]) + '" style="left:' + laneX[lane] + 'px">' + esc(lanes[lane]) + "</span>";
    }).join("");
    head.scrollLeft = scroller.scrollLeft;
  }

  // ---- drawing ------------------------------------------------------------------------
  function label(i, room) {
    var r = rows[i], e = events[i], m = r[3] >= 0 ? methods[r[3]] : "?", text;
    if (r[0] === 0) text = m + " #" + idText(e.id);
    else if (r[0] === 1) {
      text = "\u21a9 " + m + " #" + idText(e.id);  // an error puts its code first: truncation keeps it
      if (r[6]) text = "\u2716 " + (e.payload && e.payload.code !== undefined ? e.payload.code : "error") + " " + text;
      if (r[5] < 0) text += " (unpaired)";
    } else text = m;
    if (r[8]) text = "mcp " + text;
    var max = Math.max(6, Math.floor(room / 6.2));
    return text.length > max ? text.slice(0, max - 1) + "\u2026" : text;
  }
  function schedule() {
    head.scrollLeft = scroller.scrollLeft;
    if (pending) return;
    pending = true;
    // the next frame, or a timer where no frame comes (a background tab, a headless dump)
    var go = function () { if (pending) { pending = false; draw(); } };
    requestAnimationFrame(go);
    setTimeout(go, 50);
  }
  function draw() {
    var n = visible.length, top = scroller.scrollTop, height = scroller.clientHeight || 600;
    var first = Math.max(0, Math.floor(top / ROW_H) - OVERSCAN);
    var last = Math.min(n, Math.ceil((top + height) / ROW_H) + OVERSCAN);
    var h = Math.max(0, last - first) * ROW_H, parts = [], selPair = state.sel >= 0 ? rows[state.sel][5] : -1;
    svg.style.top = (first * ROW_H) + "px";
    svg.setAttribute("height", h);
    shownLanes.forEach(function (lane) {
      parts.push('<line class="life" x1="' + laneX[lane] + '" x2="' + laneX[lane] + '" y1="0" y2="' + h + '"/>');
    });
    var t0 = rows.length && rows[0][7] !== null ? rows[0][7] : 0;
    for (var p = first; p < last; p++) {
      var i = visible[p], r = rows[i], y = (p - first) * ROW_H, mid = y + ROW_H / 2 + 5;
      var x1 = laneX[r[1]], x2 = laneX[r[2]], cls = "msg " + KIND_CLASS[r[0]];
      if (r[6]) cls += " err";
      if (r[8]) cls += " mcp";
      if (i === state.sel) cls += " sel"; else if (i === selPair) cls += " pair";
      var ts = r[7] === null ? "" : "+" + ((r[7] - t0) * 1000).toFixed(1) + "ms";
      parts.push('<g class="' + cls + '" data-i="' + i + '" data-kind="' + kinds[r[0]] + '" data-from="' + esc(lanes[r[1]]) +
                 '" data-to="' + esc(lanes[r[2]]) + '"' + (r[5] >= 0 ? ' data-pair="' + r[5] + '"' : "") + ">");
      parts.push('<rect class="hit" x="0" y="' + y + '" width="' + width + '" height="' + ROW_H + '"/>');
      parts.push('<text class="gutter" x="4" y="' + (y + 16) + '">' + (i + 1) + " " + esc(ts) + "</text>");
      var d, headPts, lx, room;
      if (x1 === x2) {  // a message to itself: a small loop
        d = "M" + x1 + "," + (mid - 3) + " h26 v7 h-26";
        headPts = x1 + "," + (mid + 4) + " " + (x1 + HEAD) + "," + (mid + 1) + " " + (x1 + HEAD) + "," + (mid + 7);
        lx = x1 + 30; room = 200;
        parts.push('<path class="arrow" d="' + d + '"/><polygon class="head" points="' + headPts + '"/>');
        parts.push('<text class="label" x="' + lx + '" y="' + (mid - 4) + '">' + esc(label(i, room)) + "</text>");
      } else {
        var dir = x2 > x1 ? 1 : -1, tip = x2 - dir;
        parts.push('<line class="arrow" x1="' + x1 + '" y1="' + mid + '" x2="' + (tip - dir * HEAD) + '" y2="' + mid + '"/>');
        parts.push('<polygon class="head" points="' + tip + "," + mid + " " + (tip - dir * HEAD) + "," + (mid - 4) + " " +
                   (tip - dir * HEAD) + "," + (mid + 4) + '"/>');
        room = Math.abs(x2 - x1) - 10;
        parts.push('<text class="label" text-anchor="middle" x="' + ((x1 + x2) / 2) + '" y="' + (mid - 4) + '">' +
                   esc(label(i, room)) + "</text>");
      }
      parts.push("</g>");
    }
    if (state.sel >= 0 && selPair >= 0 && posOf[state.sel] >= 0 && posOf[selPair] >= 0) {
      // the pair's bridge, on the requester's lane (the request's sender)
      var req = rows[state.sel][0] === 0 ? state.sel : selPair, resp = req === state.sel ? selPair : state.sel;
      var a = posOf[req], b = posOf[resp], x = laneX[rows[req][1]] - 6;
      var ya = Math.max(a - first, -1) * ROW_H + ROW_H / 2 + 5, yb = Math.min(b - first, last - first + 1) * ROW_H + ROW_H / 2 + 5;
      if (b >= first && a < last) parts.push('<path class="bridge" d="M' + (x + 6) + "," + ya + " H" + (x - 6) + " V" + yb + " H" + (x + 6) + '"/>');
    }
    svg.innerHTML = parts.join("");
    var root = document.documentElement;
    root.dataset.visible = String(n);
    root.dataset.drawn = String(last > first ? last - first : 0);
    root.dataset.rendered = "true";
    var status = n + " of " + total + " messages";
    if (data.warnings.length) status += " \u2022 " + data.warnings.length + " warning(s)";
    el("status").textContent = status;
    el("status").className = data.warnings.length ? "warn" : "";
    el("status").title = data.warnings.join("\n");
    if (!n) el("status").textContent += " (no message matches the filters)";
  }

  // ---- selection and the detail pane --------------------------------------------------
  function select(i, scroll) {
    state.sel = i;
    writeHash();
    if (scroll && posOf[i] >= 0) reveal(posOf[i]);
    draw();
    detail();
  }
  function reveal(p) {
    var y = p * ROW_H, h = scroller.clientHeight;
    if (y < scroller.scrollTop || y + ROW_H > scroller.scrollTop + h) scroller.scrollTop = Math.max(0, y - h / 2);
  }
  function detail() {
    var box = el("detail");
    box.textContent = "";
    if (state.sel < 0) {
      var hint = document.createElement("p"); hint.className = "hint"; hint.textContent = "Click a message to see its JSON.";
      box.appendChild(hint);
      return;
    }
    var i = state.sel, r = rows[i], e = events[i];
    var h = document.createElement("h2");
    h.textContent = "#" + (i + 1) + " " + kinds[r[0]] + (r[3] >= 0 ? " " + methods[r[3]] : "");
    box.appendChild(h);
    var dl = document.createElement("dl");
    var add = function (k, v) {
      var dt = document.createElement("dt"), dd = document.createElement("dd");
      dt.textContent = k; dd.textContent = v; dl.appendChild(dt); dl.appendChild(dd);
    };
    add("hop", lanes[r[1]] + " \u2192 " + lanes[r[2]]);
    if (e.id !== undefined) add("id", idText(e.id));
    add("session", r[4] >= 0 ? sessions[r[4]] : "(none)");
    if (r[7] !== null) add("ts", r[7].toFixed(6) + " s");
    if (e.protocol) add("protocol", e.protocol);
    if (r[5] >= 0 && r[7] !== null && rows[r[5]][7] !== null) {
      add(r[0] === 0 ? "answered after" : "request sent", (Math.abs(rows[r[5]][7] - r[7]) * 1000).toFixed(3) + " ms " + (r[0] === 0 ? "" : "before"));
    } else if (r[0] === 0) add("response", "none in the trace");
    box.appendChild(dl);
    if (r[5] >= 0) {
      var b = document.createElement("button");
      b.type = "button"; b.id = "goto-pair";
      b.textContent = (r[0] === 0 ? "go to response #" : "go to request #") + (r[5] + 1);
      if (posOf[r[5]] < 0) b.textContent += " (filtered out)";
      b.disabled = posOf[r[5]] < 0;
      b.addEventListener("click", function () { select(r[5], true); });
      box.appendChild(b);
    }
    var pre = document.createElement("pre");
    pre.id = "detail-json";
    pre.textContent = JSON.stringify(e, null, 2);
    box.appendChild(pre);
  }

  function changed() {
    writeHash();
    refilter();
    layout();
    draw();
    detail();
  }

  readHash();
  buildControls();
  syncControls();
  refilter();
  layout();
  if (state.sel >= 0 && posOf[state.sel] >= 0) reveal(posOf[state.sel]);
  draw();
  detail();
})();
