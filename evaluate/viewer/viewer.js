"use strict";
// The CADER trajectory viewer: draws the cards inlined in #data, with filters and counts.
// A card is a light placeholder (its header) until it nears the viewport; its body (options, margin against tau,
// timeline, proposal rounds, RGR maps, thumbnails, judgments) is drawn then, so 2,000 samples open at once.
// Open the page with #all to draw every card's body at load (the browser test does, to catch a card that throws),
// with #f=DIM:VALUE|DIM:VALUE to open it filtered (joined by &: #all&f=route:stage2).
(function () {
  const errorBox = document.getElementById("errors");
  function report(message) {
    errorBox.hidden = false;
    const line = document.createElement("div");
    line.textContent = message;
    errorBox.appendChild(line);
  }
  window.addEventListener("error", (e) => report("script error: " + e.message));

  const started = performance.now();
  const DATA = JSON.parse(document.getElementById("data").textContent);
  const cards = DATA.cards;
  const dims = DATA.filters;
  // no prototype: a name from the address (#f=__proto__:x, constructor:y) must not reach Object's own members
  const chosen = Object.create(null);
  dims.forEach((d) => (chosen[d] = new Set()));
  let query = "";
  // The address can carry a view: #f=route:stage2|correct:wrong chooses filter values, #all draws every card.
  let hashText = "";
  try {
    hashText = decodeURIComponent(location.hash.slice(1));
  } catch (e) {
    hashText = "";  // a malformed %-escape: the page opens unfiltered
  }
  const hashWords = hashText.split("&");
  const drawEveryCard = hashWords.includes("all");
  for (const word of hashWords) {
    if (!word.startsWith("f=")) continue;
    for (const pair of word.slice(2).split("|")) {
      const at = pair.indexOf(":");
      if (at > 0 && chosen[pair.slice(0, at)]) chosen[pair.slice(0, at)].add(pair.slice(at + 1));
    }
  }

  function esc(s) {
    return String(s === null || s === undefined ? "" : s).replace(/[&<>"']/g,
      (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
  }
  function num(x, digits) {
    if (x === null || x === undefined) return "-";
    if (typeof x !== "number") return esc(x);
    return String(Number(x.toFixed(digits === undefined ? 3 : digits)));
  }
  function clock(seconds) {
    const s = Math.max(0, Math.round(seconds));
    const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    const mm = h ? String(m).padStart(2, "0") : String(m);
    return (h ? h + ":" : "") + mm + ":" + String(r).padStart(2, "0");
  }
  function win(w) {
    return w ? "[" + num(w[0], 1) + ", " + num(w[1], 1) + "] s" : "-";
  }

  // ---- filters ----------------------------------------------------------------------------------------------------
  function matches(card, except) {
    for (const d of dims) {
      if (d !== except && chosen[d].size && !chosen[d].has(card.f[d])) return false;
    }
    if (query) {
      const hay = (card.id + " " + (card.q || "") + " " + (card.video || "")).toLowerCase();
      if (!hay.includes(query)) return false;
    }
    return true;
  }

  function drawFilters() {
    const box = document.getElementById("filters");
    box.innerHTML = dims.map((d) => {
      const values = Object.keys(DATA.counts[d]);
      const boxes = values.map((v) =>
        '<label><input type="checkbox" data-dim="' + esc(d) + '" data-value="' + esc(v) + '"' +
        (chosen[d].has(v) ? " checked" : "") + "> " + esc(v) +
        ' <span class="count" data-dim="' + esc(d) + '" data-value="' + esc(v) + '">' +
        DATA.counts[d][v] + "</span></label>").join("");
      return '<fieldset data-dim="' + esc(d) + '"><legend>' + esc(d) + "</legend>" + boxes + "</fieldset>";
    }).join("");
    box.addEventListener("change", (e) => {
      const t = e.target;
      if (!t.dataset.dim) return;
      if (t.checked) chosen[t.dataset.dim].add(t.dataset.value);
      else chosen[t.dataset.dim].delete(t.dataset.value);
      update();
    });
    document.getElementById("search").addEventListener("input", (e) => {
      query = e.target.value.trim().toLowerCase();
      update();
    });
  }

  // Each value's count is over the cards the other dimensions' choices leave (choosing a route shows how many of
  // those are correct); with nothing chosen the counts are the run's totals, the report's numbers.
  function updateCounts() {
    for (const d of dims) {
      const counts = {};
      for (const c of cards) if (matches(c, d)) counts[c.f[d]] = (counts[c.f[d]] || 0) + 1;
      document.querySelectorAll('.count[data-dim="' + CSS.escape(d) + '"]').forEach((el) => {
        el.textContent = counts[el.dataset.value] || 0;
      });
    }
  }

  // ---- cards ------------------------------------------------------------------------------------------------------
  function head(c, i) {
    const f = c.f;
    const verdict = f.correct === "correct" ? "ok" : f.correct === "wrong" ? "wrong" : f.correct === "failed" ? "failed" : "";
    return '<article class="card pending ' + verdict + '" id="c' + i + '" data-i="' + i + '"' +
      dims.map((d) => " data-" + d + '="' + esc(f[d]) + '"').join("") + '><div class="head">' +
      '<span class="sid">' + esc(f.benchmark) + " / " + esc(c.id) + "</span>" +
      '<span class="badge">' + esc(f.run) + "</span>" +
      '<span class="badge ' + esc(f.route) + '">' + esc(f.route) + "</span>" +
      '<span class="badge ' + esc(f.correct) + '">' + esc(f.correct) + "</span>" +
      (c.s2 ? '<span class="badge">fallback: ' + esc(f.fallback) + "</span>" : "") +
      "<span>pred <b>" + esc(c.pred) + "</b> · gold <b>" + esc(c.gold) + "</b></span>" +
      (c.err ? '<span class="badge err">' + esc(c.err) + "</span>" : "") +
      '</div><div class="body"></div></article>';
  }

  function options(c) {
    const probs = (c.s1 && c.s1.probs) || [];
    const stage1Pred = c.s1 && c.s1.pred;
    return '<ul class="opts">' + c.opts.map((text, k) => {
      const letter = c.letters[k] || "?";
      const p = probs[k];
      const cls = (letter === c.gold ? "gold " : "") + (letter === c.pred ? "pred" : "");
      return '<li class="' + cls + '"><span class="letter">' + esc(letter) + "</span><span>" + esc(text) +
        (letter === c.gold ? " ★" : "") + (letter === stage1Pred ? " (A1)" : "") + "</span>" +
        '<span class="pbar"><i style="width:' + (p === undefined ? 0 : 100 * p).toFixed(1) + '%"></i></span>' +
        "<span>" + (p === undefined ? "" : num(p, 3)) + "</span></li>";
    }).join("") + "</ul>";
  }

  function marginBar(c) {
    const s1 = c.s1;
    if (!s1) return '<p class="bad">no Stage-1 result</p>';
    const m = s1.m, tau = s1.tau;
    const side = m === null || tau === null || tau === undefined ? "" : m >= tau ? " ≥ τ → exit" : " < τ → Stage 2";
    return '<div class="margin"><span>margin M = <b>' + num(m, 4) + "</b>" + esc(side) + "</span>" +
      '<span class="mbar" title="margin against tau"><i style="width:' + (100 * Math.max(0, Math.min(1, m || 0))).toFixed(1) +
      '%"></i>' + (tau === null || tau === undefined ? "" : '<b style="left:' + (100 * Math.min(1, tau)).toFixed(1) + '%"></b>') +
      "</span><span>τ = " + num(tau, 4) + " · T = " + num(s1.T) + " · " + esc(s1.n) + " frames @ " + num(s1.fps) +
      " fps" + (s1.reused ? " · reused" : "") + "</span></div>";
  }

  // The timeline: the whole video, then one row per proposal round (window outlined, crop filled green when the
  // verifier accepted it, red when it rejected it, grey unverified) and one per RGR map (shade = frame rate).
  function timeline(c) {
    const s2 = c.s2;
    const D = Math.max(Number(c.dur) || 1, 1e-6);
    const X0 = 70, W = 1000, ROW = 18;
    const x = (t) => X0 + (W * Math.max(0, Math.min(D, Number(t)))) / D;
    const rows = [];
    const label = (y, text) => '<text x="2" y="' + (y + 12) + '">' + esc(text) + "</text>";
    let y = 0;
    rows.push(label(y, "video") + '<rect x="' + X0 + '" y="' + (y + 3) + '" width="' + W + '" height="10" fill="#cfd6df"/>');
    y += ROW;
    const items = [];
    if (s2) {
      s2.rounds.forEach((r) => items.push({ kind: "round", i: r.i, r: r }));
      s2.rgr.forEach((g) => items.push({ kind: "rgr", i: g.i, g: g }));
    }
    items.sort((a, b) => a.i - b.i || (a.kind === "rgr" ? -1 : 1));
    for (const item of items) {
      if (item.kind === "round") {
        const r = item.r;
        let body = "";
        if (r.crop) {
          const color = r.ok === true ? "#2c9b4b" : r.ok === false ? "#d0463b" : "#9aa3ad";
          body += '<rect x="' + x(r.crop[0]) + '" y="' + (y + 2) + '" width="' + Math.max(1.5, x(r.crop[1]) - x(r.crop[0])) +
            '" height="12" fill="' + color + '" fill-opacity="0.75"><title>crop ' + esc(win(r.crop)) + "</title></rect>";
        }
        if (r.win) {
          body += '<rect x="' + x(r.win[0]) + '" y="' + (y + 1) + '" width="' + Math.max(1.5, x(r.win[1]) - x(r.win[0])) +
            '" height="14" fill="none" stroke="' + (r.broad ? "#e07b00" : "#2345a8") + '" stroke-width="1.5"><title>window ' +
            esc(win(r.win)) + "</title></rect>";
          const note = r.broad ? "too broad" : r.p === null || r.p === undefined ? (r.skip ? "unverified" : "") :
            "P_yes " + num(r.p, 3) + (r.ok ? " ✓" : " ✗");
          const tx = Math.min(x(r.win[1]) + 4, X0 + W - 90);
          body += '<text x="' + tx + '" y="' + (y + 12) + '">' + esc(note) + "</text>";
        } else {
          body += '<text x="' + (X0 + 4) + '" y="' + (y + 12) + '">no window read (' + esc(r.why || "unparseable") + ")</text>";
        }
        rows.push(label(y, "#" + r.i + " " + (r.ctx || "")) + body);
      } else {
        const g = item.g;
        const top = Math.max(1e-9, ...g.map.map((row) => Number(row[2]) || 0));
        let body = g.unexplored.map((u) => '<rect x="' + x(u[0]) + '" y="' + (y + 5) + '" width="' + Math.max(1, x(u[1]) - x(u[0])) +
          '" height="6" fill="#b8c4d6"><title>unexplored ' + esc(win(u)) + "</title></rect>").join("");
        body += g.map.map((row) => '<rect x="' + x(row[0]) + '" y="' + (y + 2) + '" width="' + Math.max(1, x(row[1]) - x(row[0])) +
          '" height="12" fill="#7b3fb0" fill-opacity="' + (0.15 + (0.85 * (Number(row[2]) || 0)) / top).toFixed(3) + '"><title>' +
          esc(win(row)) + " at " + num(row[2], 3) + " fps</title></rect>").join("");
        if (g.mode !== "rgr") body += '<text x="' + (X0 + 4) + '" y="' + (y + 12) + '">' + esc(g.mode) + ": Stage-1 frames again</text>";
        rows.push(label(y, "RGR→#" + g.i) + body);
      }
      y += ROW;
    }
    let overlay = "";
    if (s2 && s2.acc) {
      overlay = '<rect x="' + x(s2.acc[0]) + '" y="0" width="' + Math.max(2, x(s2.acc[1]) - x(s2.acc[0])) + '" height="' + y +
        '" fill="#ffd54a" fill-opacity="0.25" stroke="#c9a000" stroke-dasharray="4 2"><title>accepted ' + esc(win(s2.acc)) +
        "</title></rect>";
    }
    const ticks = [0, 0.25, 0.5, 0.75, 1].map((q) => '<line x1="' + x(q * D) + '" x2="' + x(q * D) + '" y1="' + y + '" y2="' +
      (y + 4) + '" stroke="#555"/><text x="' + (x(q * D) - (q === 1 ? 30 : q === 0 ? 0 : 14)) + '" y="' + (y + 16) + '">' +
      clock(q * D) + "</text>").join("");
    return '<svg class="timeline" viewBox="0 0 ' + (X0 + W + 4) + " " + (y + 20) + '" role="img">' + rows.join("") +
      overlay + ticks + "</svg>";
  }

  function roundsTable(s2) {
    if (!s2.rounds.length) return "";
    const rows = s2.rounds.map((r) => {
      const verdict = r.ok === true ? '<td class="acc">accept</td>' : r.ok === false ? '<td class="rej">reject</td>' :
        "<td>" + (r.skip ? "unverified" : r.broad ? "too broad" : "-") + "</td>";
      return "<tr><td>" + esc(r.i) + "</td><td>" + esc(r.ctx) + " (" + esc(r.n_ctx) + " fr)</td><td>" + esc(win(r.win)) +
        "</td><td>" + esc(win(r.crop)) + "</td><td>" + num(r.r2) + "</td><td>" + esc(r.n_crop === undefined ? "-" : r.n_crop) +
        "</td><td>" + num(r.p, 4) + "</td>" + verdict + "<td>" + esc(r.how || r.why || "") + "</td><td>" +
        (r.raw ? "<details><summary>reply</summary><pre>" + esc(r.raw) + "</pre></details>" : "") + "</td></tr>";
    }).join("");
    return '<table class="rounds"><thead><tr><th>iter</th><th>context</th><th>window</th><th>crop</th><th>r2</th>' +
      "<th>crop frames</th><th>P_yes</th><th>verdict</th><th>parsed</th><th>raw</th></tr></thead><tbody>" + rows + "</tbody></table>";
  }

  function rgrList(s2) {
    if (!s2.rgr.length) return "";
    return "<h6>Relevance-guided resampling</h6><ul>" + s2.rgr.map((g) => "<li>before #" + esc(g.i) + ": " + esc(g.mode) +
      ", " + esc(g.n) + " frames" + (g.planned !== null && g.planned !== undefined ? " (planned " + esc(g.planned) + ")" : "") +
      (g.map.length ? "; map " + g.map.map((row) => esc(win(row)) + " at " + num(row[2], 3) + " fps").join(", ") : "") + "</li>").join("") +
      "</ul>";
  }

  function answerBlock(s2) {
    const a = s2.ans;
    const head = "<p>Stage 2: <b>" + esc(s2.pred) + "</b> · accepted " + esc(win(s2.acc)) + " · cycles " + esc(s2.cycles) +
      " · fallback " + esc(s2.fb || "none") + "</p>";
    if (!a) return head;
    return head + "<p>final answer on " + esc(win(a.win)) + " (" + esc(a.n) + " frames): <b>" + esc(a.pred) + "</b>, read by " +
      esc(a.how || a.why || "-") + (a.kept_a1 ? " — no letter read, A1 kept" : "") + "</p>" +
      (a.raw ? "<details><summary>final reply</summary><pre>" + esc(a.raw) + "</pre></details>" : "");
  }

  function thumbs(c) {
    if (!c.thumbs || !c.thumbs.length) return "";
    return '<div class="thumbs">' + c.thumbs.map((t) => '<div><img alt="frame at ' + num(t.t, 1) + ' s" src="' + t.src +
      '"><span>' + clock(t.t) + "</span></div>").join("") + "</div>";
  }

  function judgments(c) {
    if (!c.judge || !c.judge.length) return "";
    return c.judge.map((j) => {
      const axes = ["P1", "P2", "P3", "P4", "P5"];
      return '<div class="judge"><h6>Judge ' + esc(j.model) + (j.err ? ' <span class="bad">' + esc(j.err) + "</span>" : "") +
        "</h6><table><tr>" + axes.map((a) => "<th>" + a + "</th>").join("") + "<th>Traj</th><th>MC</th></tr><tr>" +
        axes.map((a) => "<td>" + num(j.scores[a]) + "</td>").join("") + "<td>" + num(j.traj) + "</td><td>" + num(j.mc) +
        "</td></tr></table><ul>" + j.ms.map((m) => '<li class="' + esc(m.status) + '">' + esc(m.id) + ": " + esc(m.status) +
        (m.ev ? " — " + esc(m.ev) : "") + "</li>").join("") + "</ul><p>failure tags: " +
        (j.tags.length ? j.tags.map(esc).join(", ") : "none") + "</p>" + (j.summary ? "<p>" + esc(j.summary) + "</p>" : "") + "</div>";
    }).join("");
  }

  function body(c) {
    const cost = Object.keys(c.cost).map((k) => esc(k) + " " + num(c.cost[k], 2)).join(" · ");
    return (c.bad ? '<p class="bad">breaks the predictions contract: ' + esc(c.bad) + "</p>" : "") +
      '<p class="q">' + esc(c.q) + "</p><p>video " + esc(c.video) + " · " + (c.dur_known ? clock(c.dur) : "duration not stated") + "</p>" + options(c) +
      marginBar(c) + (c.s2 ? timeline(c) + roundsTable(c.s2) + rgrList(c.s2) + answerBlock(c.s2) : "") + thumbs(c) +
      judgments(c) + '<p class="meta">cost: ' + cost + "</p>";
  }

  function fill(el) {
    if (!el.classList.contains("pending")) return;
    const c = cards[Number(el.dataset.i)];
    try {
      el.querySelector(".body").innerHTML = body(c);
    } catch (err) {
      report("card " + c.f.run + "/" + c.id + ": " + err.message);
    }
    el.classList.remove("pending");
    el.classList.add("filled");
  }

  const observer = "IntersectionObserver" in window ? new IntersectionObserver((entries) => {
    for (const e of entries) {
      if (e.isIntersecting) {
        fill(e.target);
        observer.unobserve(e.target);
      }
    }
  }, { rootMargin: "1200px 0px" }) : null;

  function update() {
    const shown = [];
    cards.forEach((c, i) => { if (matches(c, null)) shown.push(i); });
    const main = document.getElementById("cards");
    if (observer) observer.disconnect();
    main.innerHTML = shown.map((i) => head(cards[i], i)).join("");
    const placed = main.querySelectorAll(".card");
    const drawAll = drawEveryCard || !observer;
    placed.forEach((el, k) => {
      if (drawAll || k < 8) fill(el);   // the first screen at once, without waiting for the observer
      else observer.observe(el);
    });
    document.getElementById("shown").textContent = shown.length + " of " + cards.length + " samples shown";
    updateCounts();
  }

  drawFilters();
  update();
  document.body.dataset.scriptMs = (performance.now() - started).toFixed(1);
  document.body.dataset.readyMs = performance.now().toFixed(1);
  document.body.dataset.ready = "1";
})();
