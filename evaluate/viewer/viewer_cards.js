// ---- one card: the head line, then the question with the Stage-1 probabilities, the margin against tau, the
// proposal timeline with a strip of frames per verified crop, the rounds, RGR maps, the final answer, and the
// judge's reasons (per-axis rationales, each ground-truth milestone with its status and evidence, failure tags).

function verdictClass(f) {
  return f.correct === "correct" ? "ok" : f.correct === "wrong" ? "wrong" : f.correct === "failed" ? "failed" : "";
}

function head(c) {
  const f = c.f;
  const others = cardsOfQuestion[c.qi].length;
  const key = questionKey(c.qi);
  return '<div class="head"><span class="sid">' + esc(f.benchmark) + " / " + esc(c.id) + "</span>" +
    '<span class="badge">' + esc(f.run) + "</span>" +
    '<span class="badge ' + esc(f.route) + '">' + esc(f.route) + "</span>" +
    '<span class="badge ' + esc(f.correct) + '">' + esc(f.correct) + "</span>" +
    (c.s2 ? '<span class="badge">fallback: ' + esc(f.fallback) + "</span>" : "") +
    "<span>pred <b>" + esc(c.pred) + "</b> · gold <b>" + esc(c.gold) + "</b></span>" +
    (c.err ? '<span class="badge err">' + esc(c.err) + "</span>" : "") +
    (others > 1 ? '<a class="qlink" href="' + esc(addressOf({ v: "question", q: key, f: chosenPairs(), all: false })) + '">all ' +
      others + " runs on this question</a>" : "") + "</div>";
}

function options(c) {
  const probs = (c.s1 && c.s1.probs) || [];
  const stage1Pred = c.s1 && c.s1.pred;
  return '<ul class="opts">' + (c.opts || []).map((text, k) => {
    const letter = (c.letters || [])[k] || "?";
    const p = probs[k];
    const cls = (letter === c.gold ? "gold " : "") + (letter === c.pred ? "pred" : "");
    return '<li class="' + cls + '"><span class="letter">' + esc(letter) + "</span><span>" + esc(text) +
      (letter === c.gold ? " ★" : "") + (letter === stage1Pred ? " (A1)" : "") + "</span>" +
      (probs.length ? '<span class="pbar"><i style="width:' + (p === undefined ? 0 : 100 * p).toFixed(1) + '%"></i></span>' +
        "<span>" + (p === undefined ? "" : num(p, 3)) + "</span>" : "") + "</li>";
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
  s2.rounds.forEach((r) => items.push({ kind: "round", i: r.i, r: r }));
  s2.rgr.forEach((g) => items.push({ kind: "rgr", i: g.i, g: g }));
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
  if (s2.acc) {
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

function frameStrip(frames) {
  return frames.map((t) => '<div><img alt="frame at ' + num(t.t, 1) + ' s" src="' + esc(t.src) + '"><span>' + clock(t.t) +
    "</span></div>").join("");
}

// A strip of frames per crop the verifier judged: what the accepted window showed and what the rejected ones did.
function strips(s2) {
  const judged = s2.rounds.filter((r) => r.strip && r.strip.length);
  if (!judged.length) return "";
  return '<div class="strips">' + judged.map((r) => {
    const cls = r.ok === true ? "acc" : r.ok === false ? "rej" : "";
    const verdict = r.ok === true ? "accepted" : r.ok === false ? "rejected" : "unverified";
    return '<div class="strip ' + cls + '" data-round="' + esc(r.i) + '"><span class="what">#' + esc(r.i) + " crop " +
      esc(win(r.crop)) + ": " + verdict + (r.p === null || r.p === undefined ? "" : ", P_yes " + num(r.p, 3)) +
      '</span><div class="thumbs">' + frameStrip(r.strip) + "</div></div>";
  }).join("") + "</div>";
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
  return '<div class="scroll"><table class="rounds"><thead><tr><th>iter</th><th>context</th><th>window</th><th>crop</th>' +
    "<th>r2</th><th>crop frames</th><th>P_yes</th><th>verdict</th><th>parsed</th><th>raw</th></tr></thead><tbody>" + rows +
    "</tbody></table></div>";
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
  const top = "<p>Stage 2: <b>" + esc(s2.pred) + "</b> · accepted " + esc(win(s2.acc)) + " · cycles " + esc(s2.cycles) +
    " · fallback " + esc(s2.fb || "none") + "</p>";
  if (!a) return top;
  return top + "<p>final answer on " + esc(win(a.win)) + " (" + esc(a.n) + " frames): <b>" + esc(a.pred) + "</b>, read by " +
    esc(a.how || a.why || "-") + (a.kept_a1 ? " — no letter read, A1 kept" : "") + "</p>" +
    (a.raw ? "<details><summary>final reply</summary><pre>" + esc(a.raw) + "</pre></details>" : "");
}

function thumbs(c) {
  if (!c.thumbs || !c.thumbs.length) return "";
  return '<div class="thumbs answer-window">' + frameStrip(c.thumbs) + "</div>";
}

function tagLink(tag) {
  return '<a class="tag" href="' + esc(addressOf({ v: "samples", q: null, f: [["tag", tag]], all: false })) + '">' +
    esc(tag) + "</a>";
}

// The judge's verdict: each axis with its score and the judge's reason, each ground-truth milestone (as the
// benchmark states it) with the status and evidence the judge gave, the failure tags (each a filter link).
function judgments(c) {
  if (!c.judge || !c.judge.length) return "";
  const truth = {};
  (c.ms || []).forEach((m) => { truth[m.id] = m; });
  return c.judge.map((j) => {
    const axes = ["P1", "P2", "P3", "P4", "P5"];
    const why = j.why || {};
    const axisRows = axes.map((a) => '<tr data-axis="' + a + '"><th>' + a + "</th><td>" + num(j.scores[a]) + "</td><td>" +
      esc(why[a] || "") + "</td></tr>").join("");
    const seen = new Set();
    const msRows = j.ms.map((m) => {
      seen.add(m.id);
      const gt = truth[m.id] || {};
      return '<tr class="' + esc(m.status) + '"><td>' + esc(m.id) + "</td><td>" + esc(gt.type || "") + "</td><td>" +
        esc(gt.d || "(not in the question)") + '</td><td class="status">' + esc(m.status) + "</td><td>" + esc(m.ev || "") + "</td></tr>";
    }).join("") + (c.ms || []).filter((m) => !seen.has(m.id)).map((m) => '<tr class="missing"><td>' + esc(m.id) + "</td><td>" +
      esc(m.type || "") + "</td><td>" + esc(m.d || "") + '</td><td class="status">not judged</td><td></td></tr>').join("");
    return '<div class="judge"><h6>Judge ' + esc(j.model) + (j.err ? ' <span class="bad">' + esc(j.err) + "</span>" : "") +
      " · Traj <b>" + num(j.traj) + "</b> · MC <b>" + num(j.mc) + '</b></h6><div class="scroll"><table class="axes">' +
      "<thead><tr><th>axis</th><th>score</th><th>the judge's reason</th></tr></thead><tbody>" + axisRows + "</tbody></table>" +
      '<table class="milestones"><thead><tr><th>milestone</th><th>type</th><th>ground truth</th><th>status</th><th>evidence</th>' +
      "</tr></thead><tbody>" + msRows + "</tbody></table></div><p>failure tags: " +
      (j.tags.length ? j.tags.map(tagLink).join(" ") : "none") + "</p>" + (j.summary ? "<p>" + esc(j.summary) + "</p>" : "") + "</div>";
  }).join("");
}

function cardBody(c) {
  const cost = Object.keys(c.cost || {}).map((k) => esc(k) + " " + num(c.cost[k], 2)).join(" · ");
  return (c.bad ? '<p class="bad">breaks the predictions contract: ' + esc(c.bad) + "</p>" : "") +
    '<p class="q">' + esc(c.q) + "</p><p>video " + esc(c.video) + " · " + (c.dur_known ? clock(c.dur) : "duration not stated") +
    "</p>" + options(c) + marginBar(c) +
    (c.s2 ? timeline(c) + strips(c.s2) + roundsTable(c.s2) + rgrList(c.s2) + answerBlock(c.s2) : "") + thumbs(c) +
    judgments(c) + '<p class="meta">cost: ' + cost + "</p>";
}

// The whole card as HTML; a card whose data breaks the drawing is reported and shown as its head only.
function cardHtml(i) {
  let c = null, inner;
  try {
    c = cardData(i);
    inner = head(c) + '<div class="body">' + cardBody(c) + "</div>";
  } catch (err) {
    report("card " + i + (c ? " (" + c.f.run + "/" + c.id + ")" : "") + ": " + err.message);
    inner = '<div class="head"><span class="bad">card ' + i + " could not be drawn</span></div>";
  }
  const f = c ? c.f : {};
  return '<article class="card filled ' + verdictClass(f) + '" id="c' + i + '" data-i="' + i + '"' +
    dims.filter((d) => d !== "tag").map((d) => " data-" + d + '="' + esc(f[d]) + '"').join("") + ">" + inner + "</article>";
}
