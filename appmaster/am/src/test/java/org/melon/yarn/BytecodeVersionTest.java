package org.melon.yarn;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.stream.Stream;

import org.junit.jupiter.api.Test;

/**
 * Every AM class (target/classes; the jar adds the shaded JSON Schema validator and its Jackson) is
 * Java 8 bytecode (class-file major 52), so the AM starts on a Hadoop 3.3/3.4 cluster's Java 8 or 11 NodeManagers
 * instead of dying with UnsupportedClassVersionError before its first log line. The shipped jar itself is checked
 * the same way by tests/unit/test_hadoop_compat.py (and by {@code melon doctor}).
 */
class BytecodeVersionTest {

  static final int JAVA_8 = 52;

  /** The class-file major version of a .class file's bytes (0xCAFEBABE, minor u2, major u2). */
  static int major(InputStream in) throws IOException {
    DataInputStream data = new DataInputStream(in);
    if (data.readInt() != 0xCAFEBABE) {
      throw new IOException("not a class file");
    }
    data.readUnsignedShort();
    return data.readUnsignedShort();
  }

  @Test
  void everyAmClassIsJava8Bytecode() throws IOException {
    Path classes = Paths.get(System.getProperty("melon.am.classes", "target/classes"));
    assertTrue(Files.isDirectory(classes), classes + " missing: run from appmaster/am (mvn test)");
    List<String> newer = new ArrayList<>();
    int count = 0;
    try (Stream<Path> files = Files.walk(classes)) {
      for (Path p : (Iterable<Path>) files.filter(f -> f.toString().endsWith(".class"))::iterator) {
        count++;
        try (InputStream in = Files.newInputStream(p)) {
          int major = major(in);
          if (major > JAVA_8) {
            newer.add(classes.relativize(p) + " (major " + major + ", Java " + (major - 44) + ")");
          }
        }
      }
    }
    assertTrue(count > 0, "no classes under " + classes);
    assertEquals(List.of(), newer, "AM classes newer than Java 8 (major 52): the AM would not start on Java 8 "
        + "clusters (Hadoop 3.3/3.4); build them with maven.compiler.release 8");
  }
}
