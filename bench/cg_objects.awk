# Instructions (Ir) per object in a callgrind output file: "COUNT OBJECT" lines.
# Exclusive costs only (the line after "calls=" is a call's inclusive cost: skipped).
function ref(s, table,    id, rest) {
    if (match(s, /^\([0-9]+\)/)) {
        id = substr(s, 2, RLENGTH - 2)
        rest = substr(s, RLENGTH + 2)
        if (rest != "") table[id] = rest
        return table[id]
    }
    return s
}
/^ob=/ { ob = ref(substr($0, 4), obs); next }
/^cob=/ { ref(substr($0, 5), obs); next }
/^calls=/ { skip = 1; next }
/^[0-9+*-]/ {
    if (skip) { skip = 0; next }
    cost[ob] += $2
}
END { for (o in cost) printf "%d %s\n", cost[o], o }
