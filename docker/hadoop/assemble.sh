#!/usr/bin/env bash
# One Hadoop line (HADOOP_VERSION: 3.3.6, 3.4.2, 3.5.0 (default)) laid out as its binary distribution does, from
# Maven Central jars:
#   $OUT/share/hadoop/common/hadoop-{common,auth,annotations,registry,...}.jar   common/lib/<third-party jars>
#   $OUT/share/hadoop/hdfs/hadoop-hdfs*.jar  hdfs/webapps/ (NN/DN web apps)       hdfs/lib/ (empty: see common/lib)
#   $OUT/share/hadoop/yarn/hadoop-yarn-*.jar                                     yarn/lib/ (empty: see common/lib)
# (the folder share/hadoop/hdfs itself goes on the daemons' classpath, for webapps/, as `hadoop classpath` has it)
# so that YARN's default yarn.application.classpath ({{HADOOP_COMMON_HOME}}/share/hadoop/common/*, .../lib/*,
# hdfs/*, yarn/* ...) finds everything. Usage: HADOOP_VERSION=3.3.6 docker/hadoop/assemble.sh OUT_DIR
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$1"
version="${HADOOP_VERSION:-3.5.0}"
case "$version" in
  3.3.6|3.4.2|3.5.0) ;;
  *) echo "[hadoop] HADOOP_VERSION=$version: one of 3.3.6, 3.4.2, 3.5.0" >&2; exit 2 ;;
esac
if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$version" ] && [ "$out/.complete" -nt "$here/pom.xml" ] \
   && [ "$out/.complete" -nt "$0" ]; then
  echo "[hadoop] $out ($version) is up to date" >&2; exit 0
fi
rm -rf "$here/target"
mvn -q -B -f "$here/pom.xml" -Dhadoop.version="$version" package >&2
rm -rf "$out/share"
mkdir -p "$out/share/hadoop/common/lib" "$out/share/hadoop/hdfs/lib" "$out/share/hadoop/yarn/lib"
for jar in "$here/target/jars"/*.jar; do
  name="$(basename "$jar")"
  case "$name" in
    hadoop-hdfs*) dest=hdfs ;;
    hadoop-yarn*) dest=yarn ;;
    hadoop-shaded-*|hadoop-thirdparty*) dest=common/lib ;;
    hadoop-*) dest=common ;;
    *) dest=common/lib ;;
  esac
  cp "$jar" "$out/share/hadoop/$dest/"
done
cp -r "$here/target/hdfs/webapps" "$out/share/hadoop/hdfs/webapps"
rm -rf "$here/target"
echo "$version" > "$out/.complete"
echo "[hadoop] $version: $(find "$out/share" -name '*.jar' | wc -l) jars, $(du -sh "$out/share" | cut -f1) in $out/share/hadoop" >&2
